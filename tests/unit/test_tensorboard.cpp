// TensorBoard's record framing, the images, and the writers' errors (io/tensorboard/, train/tensorboard_log.h).
// What TensorBoard itself reads back is tests/python/test_tensorboard.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "expect_error.h"
#include "io/png.h"
#include "io/tensorboard/event_file.h"
#include "io/tensorboard/summaries.h"
#include "train/tensorboard_log.h"

namespace canonlab {
namespace {

namespace tb = tensorboard;
using test_support::error_of;

uint32_t read_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | uint8_t(s[at + i]);
  return v;
}

TEST(TensorBoard, Crc32cIsCastagnoliAndTheMaskIsTfRecords) {
  // The CRC-32C check value (RFC 3720, B.4) and TFRecord's mask ((crc >> 15 | crc << 17) + 0xa282ead8).
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(tb::masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ARecordIsLengthCrcDataCrc) {
  const std::string data = "canonlab";
  const std::string r = tb::framed_record(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x08\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(read_u32(r, 8), tb::masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(read_u32(r, 12 + data.size()), tb::masked_crc32c(data));
}

TEST(TensorBoard, EventsSerializeToTheFieldsTensorBoardReads) {
  // Event{wall_time = 1.5 (field 1, fixed64), step = 7 (field 2, varint), summary (field 5) {value (1) {tag (1),
  // simple_value (2, fixed32)}}}: the bytes of the public format, written out by hand here.
  const tb::Event e = tb::scalar_event(1.5, 7, "a", 2.0f);
  const std::string want = std::string("\x09\0\0\0\0\0\0\xf8\x3f", 9) + "\x10\x07" + "\x2a\x0a" + "\x0a\x08" +
                           "\x0a\x01" "a" + std::string("\x15\0\0\0\x40", 5);
  EXPECT_EQ(e.bytes, want);
}

TEST(TensorBoard, TheHeatmapHasACellPerHeadAndAGrid) {
  const RgbImage img = heatmap_image({0.0, 1.0, 0.5, 0.25, 0.75, 1.0}, 2, 3, 4);
  EXPECT_EQ(img.width, 3 * 5 + 1);
  EXPECT_EQ(img.height, 2 * 5 + 1);
  auto pixel = [&](int x, int y) { return &img.rgb[(size_t(y) * img.width + x) * 3]; };
  EXPECT_EQ(pixel(0, 0)[0], 255);                       // grid
  EXPECT_EQ(pixel(1, 1)[0], 68);                        // 0: dark blue
  EXPECT_EQ(pixel(6, 1)[1], 231);                       // 1: yellow
  const std::string png = encode_png(img);
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  const std::string e = error_of([] { heatmap_image({0.0, 1.0}, 2, 3, 4); });
  EXPECT_CONTAINS(e, "heatmap_image: 2 values for 2 x 3 cells");
}

TEST(TensorBoard, AFullDiskIsAnErrorNamingTheFile) {
  // /dev/full accepts the open and fails every write with ENOSPC, as a full disk does.
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  tb::EventFile file("/dev/full");
  EXPECT_CONTAINS(error_of([&] { file.write(tb::scalar_event(0, 1, "train/loss", 1.0f)); }),
                  "cannot write to the TensorBoard event file '/dev/full' (disk full");
}

TEST(TensorBoard, AnUnwritableDirectoryIsAnErrorNamingIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "canonlab_tb_unwritable";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tb") << "a file where the directory should be";
  EXPECT_CONTAINS(error_of([&] { TensorBoardLog log(dir.string(), {}, "model: {}\n"); }),
                  "cannot create the TensorBoard directory '" + (dir / "tb").string() + "'");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace canonlab
