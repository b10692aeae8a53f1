#pragma once
// PNG encoding through libpng (Debian's libpng-dev): the images of TensorBoard's event files.
#include <cstdint>
#include <string>
#include <vector>

namespace canonlab {

// An 8-bit RGB image, rows top to bottom: pixel (x, y) at rgb[3 * (y * width + x) + channel].
struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

// The PNG file's bytes. Throws canonlab::Error with libpng's message if encoding fails.
std::string encode_png(const RgbImage& image);

}  // namespace canonlab
