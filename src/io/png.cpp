#include "io/png.h"

#include <png.h>

#include "engine/error.h"

namespace canonlab {

std::string encode_png(const RgbImage& image) {
  CANONLAB_CHECK(image.width > 0 && image.height > 0 &&
                     image.rgb.size() == size_t(image.width) * size_t(image.height) * 3,
                 "encode_png: a " + std::to_string(image.width) + " x " + std::to_string(image.height) +
                     " image needs " + std::to_string(size_t(image.width) * size_t(image.height) * 3) +
                     " bytes of RGB, got " + std::to_string(image.rgb.size()));
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = png_uint_32(image.width);
  png.height = png_uint_32(image.height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  // The first call measures, the second writes.
  if (png_image_write_to_memory(&png, nullptr, &size, 0, image.rgb.data(), 0, nullptr) == 0)
    throw Error(std::string("encode_png: ") + png.message);
  std::string out(size, '\0');
  if (png_image_write_to_memory(&png, out.data(), &size, 0, image.rgb.data(), 0, nullptr) == 0)
    throw Error(std::string("encode_png: ") + png.message);
  out.resize(size);
  return out;
}

}  // namespace canonlab
