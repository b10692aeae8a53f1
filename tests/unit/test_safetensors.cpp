// Checkpoint file I/O: safetensors round trips, the exact byte layout other readers rely on, rejection of
// every class of corruption with a message naming the file, and crash safety of the atomic writer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> to_bytes(const std::string& s) {
  std::vector<std::byte> b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}

template <class T>
std::vector<std::byte> raw_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void write_raw(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

uint64_t le64(const std::vector<std::byte>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | uint64_t(b[at + size_t(i)]);
  return v;
}

// A file from a given header text and data buffer, the way a (possibly broken) writer would produce it.
std::vector<std::byte> make_file(std::string header, const std::vector<std::byte>& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; i++) out[size_t(i)] = std::byte((n >> (8 * i)) & 0xff);
  auto h = to_bytes(header);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "canonlab_st_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes `bytes` to a fresh file and expects read_safetensors to reject it with a message that names the
  // file and contains every one of `needles`.
  void expect_corrupt(const std::vector<std::byte>& bytes, std::vector<std::string> needles) {
    std::string path = file("bad_" + std::to_string(counter_++) + ".safetensors");
    write_raw(path, bytes);
    try {
      read_safetensors(path);
      ADD_FAILURE() << "expected a corruption error containing '" << needles.front() << "'";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("'" + path + "'"), std::string::npos) << msg;
      for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
  void expect_corrupt_header(const std::string& header, size_t data_size, std::vector<std::string> needles) {
    expect_corrupt(make_file(header, std::vector<std::byte>(data_size, std::byte{7})), std::move(needles));
  }

  std::string dir_;
  int counter_ = 0;
};

// ---- XXH64 --------------------------------------------------------------------------------------------

TEST(Xxh64, MatchesTheReferenceVectors) {
  auto h = [](const std::string& s, uint64_t seed = 0) { return xxh64(to_bytes(s), seed); };
  EXPECT_EQ(h(""), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(h("a"), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(h("abc"), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(h("Nobody inspects the spammish repetition"), 0xFBCEA83C8A378BF1ULL);  // > 32 bytes: stripes
  // xxHash's own sanity check (bench.c, SANITY_BUFFER_SIZE 101), which covers every tail path and a seed.
  const uint32_t prime = 2654435761U;
  std::vector<std::byte> buf(101);
  uint32_t gen = prime;
  for (auto& b : buf) {
    b = std::byte(gen >> 24);
    gen *= gen;
  }
  std::span<const std::byte> s(buf);
  EXPECT_EQ(xxh64({}, prime), 0xAC75FDA2929B17EFULL);
  EXPECT_EQ(xxh64(s.first(1), 0), 0x4FCE394CC88952D8ULL);
  EXPECT_EQ(xxh64(s.first(1), prime), 0x739840CB819FA723ULL);
  EXPECT_EQ(xxh64(s.first(14), 0), 0xCFFA8DB881BC3A3DULL);
  EXPECT_EQ(xxh64(s.first(14), prime), 0x5B9611585EFCC9CBULL);
  EXPECT_EQ(xxh64(s, 0), 0x0EAB543384F878ADULL);
  EXPECT_EQ(xxh64(s, prime), 0xCAA65939306F1E21ULL);
}

// ---- Round trips and layout ----------------------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripsDtypesShapesAndScalars) {
  std::vector<float> a = {1.5f, -2.0f, 0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::vector<double> b = {3.141592653589793, -1e-300, 1e300, 0.1};
  std::vector<int32_t> c = {1, -2, 3, -4, 5, -6, 7, std::numeric_limits<int32_t>::min()};
  std::vector<int64_t> d = {std::numeric_limits<int64_t>::max()};  // a scalar
  std::vector<float> e;                                              // an empty tensor
  std::vector<double> f = {42.0};                                    // a scalar
  SafetensorsWriter w;
  w.add("layers.0.attn.q_proj.weight", a, {2, 3});
  w.add("b", b, {4});
  w.add("c", c, {2, 2, 2});
  w.add("step", d, {});
  w.add("empty", e, {0, 5});
  w.add("loss_scale", f, {});
  w.add_metadata("canonlab.format_version", "1");
  w.add_metadata("canonlab.config", R"({"model":{"d":64},"note":"ünïcode ✓"})");
  std::string path = file("rt.safetensors");
  w.write_atomic(path);

  SafetensorsFile r = read_safetensors(path);
  EXPECT_TRUE(r.checksum_verified);
  EXPECT_EQ(r.path, path);
  EXPECT_EQ(r.metadata.at("canonlab.format_version"), "1");
  EXPECT_EQ(r.metadata.at("canonlab.config"), R"({"model":{"d":64},"note":"ünïcode ✓"})");
  EXPECT_EQ(r.metadata.at(kChecksumAlgoKey), "xxh64");
  EXPECT_EQ(r.metadata.size(), 5u);  // the two given, and the writer's data and header checksums
  EXPECT_TRUE(r.header_checksum_verified);

  ASSERT_EQ(r.tensors.size(), 6u);
  std::vector<std::string> order;
  for (const auto& t : r.tensors) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"layers.0.attn.q_proj.weight", "b", "c", "step", "empty", "loss_scale"}));

  const TensorEntry& ta = r.get("layers.0.attn.q_proj.weight");
  EXPECT_EQ(ta.dtype, DType::F32);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta.data, raw_bytes(a));  // bit-exact, NaN and -0.0 included
  EXPECT_EQ(r.get("b").dtype, DType::F64);
  EXPECT_EQ(r.get("b").to_vector<double>(), b);
  EXPECT_EQ(r.get("c").dtype, DType::I32);
  EXPECT_EQ(r.get("c").shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(r.get("c").to_vector<int32_t>(), c);
  EXPECT_EQ(r.get("step").dtype, DType::I64);
  EXPECT_TRUE(r.get("step").shape.empty());
  EXPECT_EQ(r.get("step").numel(), 1u);
  EXPECT_EQ(r.get("step").to_vector<int64_t>(), d);
  EXPECT_EQ(r.get("empty").shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(r.get("empty").numel(), 0u);
  EXPECT_TRUE(r.get("empty").data.empty());
  std::vector<double> out(1);
  r.get("loss_scale").copy_to<double>(out);
  EXPECT_EQ(out[0], 42.0);
}

TEST_F(SafetensorsTest, EmptyMetadataAndEmptyFileRoundTrip) {
  std::vector<float> x = {1, 2, 3};
  SafetensorsWriter w;
  w.add("x", x, {3});
  std::string path = file("nometa.safetensors");
  w.write_atomic(path);
  SafetensorsFile r = read_safetensors(path);
  EXPECT_EQ(r.metadata.size(), 3u);  // only the writer's checksum keys
  EXPECT_TRUE(r.metadata.count(kChecksumKey));
  EXPECT_EQ(r.get("x").to_vector<float>(), x);

  SafetensorsWriter none;
  std::string path2 = file("none.safetensors");
  none.write_atomic(path2);
  SafetensorsFile r2 = read_safetensors(path2);
  EXPECT_TRUE(r2.tensors.empty());
  EXPECT_TRUE(r2.checksum_verified);
}

// Parses the written bytes by hand, as any other safetensors reader would.
TEST_F(SafetensorsTest, LayoutFollowsThePublicFormat) {
  std::vector<float> a = {1.0f, 2.0f, 3.0f};
  std::vector<int64_t> b = {-1, 7};
  std::vector<double> s = {0.25};
  SafetensorsWriter w;
  w.add_metadata("k", "v");
  w.add("zeta", a, {3});  // not alphabetical: the file must keep the given order
  w.add("alpha", b, {1, 2});
  w.add("scalar", s, {});
  std::vector<std::byte> bytes = w.serialize();

  uint64_t n = le64(bytes, 0);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";
  EXPECT_EQ(bytes.size(), 8 + n + 12 + 16 + 8);
  std::string header(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  EXPECT_EQ(header.front(), '{');
  size_t close = header.find_last_of('}');
  ASSERT_NE(close, std::string::npos);
  EXPECT_LT(n - (close + 1), 8u);
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";

  nlohmann::json j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  EXPECT_EQ(j["__metadata__"]["canonlab.checksum_algo"], "xxh64");
  EXPECT_EQ(j["zeta"]["dtype"], "F32");
  EXPECT_EQ(j["zeta"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(j["zeta"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(j["alpha"]["dtype"], "I64");
  EXPECT_EQ(j["alpha"]["shape"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(j["alpha"]["data_offsets"], nlohmann::json::array({12, 28}));
  EXPECT_EQ(j["scalar"]["dtype"], "F64");
  EXPECT_EQ(j["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(j["scalar"]["data_offsets"], nlohmann::json::array({28, 36}));
  EXPECT_LT(header.find("\"zeta\""), header.find("\"alpha\""));
  EXPECT_LT(header.find("\"alpha\""), header.find("\"scalar\""));

  // Data: contiguous, little-endian, 8-aligned start.
  std::vector<std::byte> data(bytes.begin() + std::ptrdiff_t(8 + n), bytes.end());
  std::vector<std::byte> want = raw_bytes(a);
  for (auto v : {raw_bytes(b), raw_bytes(s)}) want.insert(want.end(), v.begin(), v.end());
  EXPECT_EQ(data, want);
  EXPECT_EQ(data[0], std::byte{0x00});  // 1.0f = 0x3f800000, stored low byte first
  EXPECT_EQ(data[3], std::byte{0x3f});
  // The checksum is plain XXH64 of the whole data buffer, so other tools can recompute it in one call.
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(xxh64(data)));
  EXPECT_EQ(j["__metadata__"]["canonlab.data_checksum"], hex);

  // Every header length gets padded (metadata values of 8 different lengths hit every remainder).
  for (size_t k = 0; k < 8; k++) {
    SafetensorsWriter wk;
    wk.add_metadata("pad", std::string(k, 'x'));
    wk.add("zeta", a, {3});
    std::vector<std::byte> bk = wk.serialize();
    uint64_t nk = le64(bk, 0);
    EXPECT_EQ(nk % 8, 0u) << "metadata length " << k;
    EXPECT_EQ(bk.size(), 8 + nk + 12);
  }

  // Deterministic, and the atomic writer produces the same bytes.
  EXPECT_EQ(w.serialize(), bytes);
  std::string path = file("layout.safetensors");
  w.write_atomic(path);
  EXPECT_EQ(read_file(path), bytes);
}

// Files from other writers (e.g. Python's save_file without metadata, unpadded header) load unverified.
TEST_F(SafetensorsTest, ReadsFilesWithoutCanonlabMetadata) {
  std::vector<int32_t> v = {5, 6};
  std::string path = file("foreign.safetensors");
  write_raw(path, make_file(R"({"v":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", raw_bytes(v), false));
  SafetensorsFile r = read_safetensors(path);
  EXPECT_FALSE(r.checksum_verified);
  EXPECT_TRUE(r.metadata.empty());
  EXPECT_EQ(r.get("v").to_vector<int32_t>(), v);
}

TEST_F(SafetensorsTest, WriterRejectsInvalidInput) {
  std::vector<float> x = {1, 2, 3, 4};
  SafetensorsWriter w;
  w.add("x", x, {2, 2});
  EXPECT_THROW(w.add("x", x, {4}), Error);
  EXPECT_THROW(w.add("__metadata__", x, {4}), Error);
  EXPECT_THROW(w.add("", x, {4}), Error);
  EXPECT_THROW(w.add("y", x, {3}), Error);
  EXPECT_THROW(w.add("y", x, {}), Error);
  EXPECT_THROW(w.add("y", x, {-2, -2}), Error);
  EXPECT_THROW(w.add_metadata(kChecksumKey, "0000000000000000"), Error);
  EXPECT_THROW(w.add_metadata(kChecksumAlgoKey, "none"), Error);
  w.add_metadata("bad", std::string("\xff\xfe", 2));  // not UTF-8: refused when the header is built
  EXPECT_THROW(w.serialize(), Error);
}

TEST_F(SafetensorsTest, LookupErrorsNameFileAndTensor) {
  std::vector<float> x = {1, 2};
  SafetensorsWriter w;
  w.add("x", x, {2});
  std::string path = file("lookup.safetensors");
  w.write_atomic(path);
  SafetensorsFile r = read_safetensors(path);
  EXPECT_EQ(r.find("nope"), nullptr);
  try {
    r.get("layers.3.mlp.fc1.weight");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("layers.3.mlp.fc1.weight"), std::string::npos);
  }
  std::vector<double> wrong_type(2);
  EXPECT_THROW(r.get("x").copy_to<double>(wrong_type), Error);
  std::vector<float> wrong_size(3);
  EXPECT_THROW(r.get("x").copy_to<float>(wrong_size), Error);
}

// ---- Corruption --------------------------------------------------------------------------------------------

// A valid two-tensor file to damage.
std::vector<std::byte> good_file() {
  static std::vector<float> a(64, 1.25f);
  static std::vector<int64_t> b = {1, 2, 3};
  SafetensorsWriter w;
  w.add_metadata("canonlab.format_version", "1");
  w.add("layers.0.attn.q_proj.weight", a, {8, 8});
  w.add("step", b, {3});
  return w.serialize();
}

TEST_F(SafetensorsTest, GoodFileIsAccepted) {
  // The baseline for the corruption tests: without damage the same bytes load.
  std::string path = file("good.safetensors");
  write_raw(path, good_file());
  EXPECT_EQ(read_safetensors(path).tensors.size(), 2u);
}

TEST_F(SafetensorsTest, DetectsFilesTooShort) {
  expect_corrupt({}, {"0 bytes", "shorter than the 8-byte header length"});
  expect_corrupt(std::vector<std::byte>(7, std::byte{0}), {"7 bytes"});
}

TEST_F(SafetensorsTest, DetectsBadHeaderLength) {
  std::vector<std::byte> f = good_file();
  uint64_t n = le64(f, 0);
  auto with_len = [&](uint64_t len) {
    std::vector<std::byte> g = f;
    for (int i = 0; i < 8; i++) g[size_t(i)] = std::byte((len >> (8 * i)) & 0xff);
    return g;
  };
  expect_corrupt(with_len(f.size()), {"header length " + std::to_string(f.size()), "exceeds the"});
  expect_corrupt(with_len(200'000'000), {"header length 200000000 exceeds the limit"});
  expect_corrupt(with_len(std::numeric_limits<uint64_t>::max()), {"exceeds the limit"});
  expect_corrupt(with_len(0), {"not valid JSON"});
  expect_corrupt(with_len(n - 8), {"not valid JSON"});  // header cut short inside the JSON
  // Header too long: the JSON plus part of the data buffer.
  expect_corrupt(with_len(n + 8), {"not valid JSON"});
}

TEST_F(SafetensorsTest, DetectsTruncationAndTrailingGarbage) {
  std::vector<std::byte> f = good_file();
  std::vector<std::byte> cut(f.begin(), f.end() - 4);
  expect_corrupt(cut, {"tensor 'step' data_offsets [256, 280] exceed the data size 276"});
  std::vector<std::byte> cut_header(f.begin(), f.begin() + 40);
  expect_corrupt(cut_header, {"header length"});
  std::vector<std::byte> extra = f;
  for (int i = 0; i < 5; i++) extra.push_back(std::byte{0});
  expect_corrupt(extra, {"5 trailing bytes after the last tensor"});
}

TEST_F(SafetensorsTest, DetectsChecksumMismatch) {
  std::vector<std::byte> f = good_file();
  for (size_t pos : {le64(f, 0) + 8 + 5, f.size() - 1}) {  // first tensor and the very last byte
    std::vector<std::byte> g = f;
    g[pos] ^= std::byte{0x01};
    expect_corrupt(g, {"data checksum mismatch"});
  }
}

// The header checksum covers metadata values and tensor entries: an edit that keeps every structural rule (a
// changed digit in a metadata value, a renamed tensor of the same length) is still detected.
TEST_F(SafetensorsTest, DetectsHeaderEdits) {
  std::vector<float> x = {1, 2, 3};
  SafetensorsWriter w;
  w.add("weight", x, {3});
  w.add_metadata("canonlab.step", "8");
  const std::vector<std::byte> f = w.serialize();
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string bytes(reinterpret_cast<const char*>(f.data()), f.size());
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    bytes.replace(at, from.size(), to);
    return to_bytes(bytes);
  };
  expect_corrupt(edited("\"canonlab.step\":\"8\"", "\"canonlab.step\":\"1\""), {"header checksum mismatch"});
  expect_corrupt(edited("\"weight\"", "\"weighs\""), {"header checksum mismatch"});
  // The entry must be where the writer put it, exactly once: a hand-rewritten header cannot be verified.
  const std::string digits = [&] {
    const std::string path = file("ok.safetensors");
    w.write_atomic(path);
    const SafetensorsFile r = read_safetensors(path);
    EXPECT_TRUE(r.header_checksum_verified);
    return r.metadata.at(kHeaderChecksumKey);
  }();
  {
    const size_t n = le64(f, 0);
    std::string header(reinterpret_cast<const char*>(f.data()) + 8, n);
    header.erase(header.find_last_not_of(' ') + 1);
    const std::string entry = "\"canonlab.header_checksum\":\"" + digits + "\"";
    header.replace(header.find(entry), entry.size(), "\"canonlab.header_checksum\": \"" + digits + "\"");
    expect_corrupt(make_file(header, std::vector<std::byte>(f.begin() + std::ptrdiff_t(8 + n), f.end())),
                   {"cannot be verified"});
  }
  expect_corrupt(edited(digits, "not-hex-digits!!"), {"is not 16 lowercase hex digits"});
  EXPECT_THROW(w.add_metadata(kHeaderChecksumKey, digits), Error);
}

TEST_F(SafetensorsTest, DetectsInvalidJson) {
  expect_corrupt_header("{not json", 0, {"header: not valid JSON"});
  expect_corrupt_header("{\"a\":", 0, {"header: not valid JSON"});
  expect_corrupt_header("{\"a\xff\":1}", 0, {"header: not valid JSON"});  // not UTF-8
  expect_corrupt_header(std::string("{}\0garbage", 10), 0, {"NUL byte at offset 2"});  // nlohmann stops at NUL
  expect_corrupt_header("[1,2]", 0, {"header is not a JSON object"});
  expect_corrupt_header("\"x\"", 0, {"header is not a JSON object"});
  // Deep nesting is refused early instead of building a huge tree or overflowing the stack.
  expect_corrupt_header(std::string(100000, '[') + std::string(100000, ']'), 0, {"deeper than the format allows"});
  expect_corrupt_header(R"({"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4, {"tensor 't'", "deeper"});
}

TEST_F(SafetensorsTest, DetectsMissingAndIllTypedFields) {
  const std::string ok_offsets = R"("data_offsets":[0,8])";
  auto t = [](const std::string& body) { return "{\"w\":{" + body + "}}"; };
  expect_corrupt_header(t(R"("shape":[2],)" + ok_offsets), 8, {"tensor 'w' has no 'dtype'"});
  expect_corrupt_header(t(R"("dtype":"F32",)" + ok_offsets), 8, {"tensor 'w' has no 'shape'"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[2])"), 8, {"tensor 'w' has no 'data_offsets'"});
  expect_corrupt_header(t(R"("dtype":5,"shape":[2],)" + ok_offsets), 8, {"'dtype' is not a string"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":"2",)" + ok_offsets), 8, {"'shape' is not an array"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[-2],)" + ok_offsets), 8, {"'shape' is not an array"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[2.0],)" + ok_offsets), 8, {"'shape' is not an array"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[2],"data_offsets":[0])"), 8, {"'data_offsets' is not"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[2],"data_offsets":[0,"8"])"), 8, {"'data_offsets' is not"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[2],"data_offsets":[0,8,8])"), 8, {"'data_offsets' is not"});
  expect_corrupt_header(t(R"("dtype":"F32","shape":[2],"extra":1,)" + ok_offsets), 8, {"unknown field 'extra'"});
  expect_corrupt_header(R"({"w":[1,2]})", 8, {"tensor 'w' entry is not a JSON object"});
  expect_corrupt_header(R"({"__metadata__":{"a":1}})", 0, {"__metadata__ value for 'a' is not a string"});
  expect_corrupt_header(R"({"__metadata__":["a"]})", 0, {"__metadata__ is not a JSON object"});
  std::string rank65 = "[";
  for (int i = 0; i < 65; i++) rank65 += (i ? ",1" : "1");
  expect_corrupt_header(t(R"("dtype":"F32","shape":)" + rank65 + "]," + ok_offsets), 8, {"more than 64 elements"});
}

TEST_F(SafetensorsTest, DetectsUnknownDtypes) {
  expect_corrupt_header(R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8, {"unknown dtype 'F17'"});
  expect_corrupt_header(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})", 8,
                        {"dtype 'BF16', which canonlab does not read"});
}

TEST_F(SafetensorsTest, DetectsShapeOffsetMismatch) {
  expect_corrupt_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
                        {"tensor 'w' has shape [3] and dtype F32, which need 12 bytes, but data_offsets [0, 8] span 8"});
  expect_corrupt_header(R"({"w":{"dtype":"F64","shape":[],"data_offsets":[0,4]}})", 4, {"need 8 bytes"});
  // Overflowing products are reported, not wrapped around to a matching size.
  expect_corrupt_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", 0,
                        {"more than 2^64"});
}

TEST_F(SafetensorsTest, DetectsBadOffsets) {
  auto two = [](const std::string& a, const std::string& b) {
    return R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + a + R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":)" + b + "}}";
  };
  expect_corrupt_header(
      R"({"layers.0.attn.q_proj.weight":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8,
      {"tensor 'layers.0.attn.q_proj.weight' data_offsets [8, 16] exceed the data size 8"});
  expect_corrupt_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, {"end before they begin"});
  expect_corrupt_header(two("[0,8]", "[4,12]"), 12, {"tensors 'a' data_offsets [0, 8] and 'b' data_offsets [4, 12] overlap"});
  expect_corrupt_header(two("[0,8]", "[0,8]"), 8, {"overlap"});
  expect_corrupt_header(two("[0,8]", "[12,20]"), 20, {"bytes [8, 12) of the data buffer belong to no tensor"});
  expect_corrupt_header(two("[8,16]", "[16,24]"), 24, {"bytes [0, 8)"});
  expect_corrupt_header(two("[0,8]", "[8,16]"), 20, {"4 trailing bytes"});
  // Valid when tiled exactly, regardless of header order.
  std::string path = file("tiled.safetensors");
  write_raw(path, make_file(two("[8,16]", "[0,8]"), std::vector<std::byte>(16, std::byte{0})));
  SafetensorsFile r = read_safetensors(path);
  ASSERT_EQ(r.tensors.size(), 2u);
  EXPECT_EQ(r.tensors[0].name, "b");  // data order
}

TEST_F(SafetensorsTest, DetectsDuplicateNames) {
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_corrupt_header("{\"w\":" + e + ",\"w\":" + e + "}", 4, {"duplicate tensor name 'w'"});
  expect_corrupt_header(R"({"__metadata__":{"a":"1","a":"2"}})", 0, {"__metadata__: duplicate key 'a'"});
  expect_corrupt_header(R"({"__metadata__":{},"__metadata__":{}})", 0, {"duplicate __metadata__"});
  expect_corrupt_header(R"({"w":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", 4,
                        {"tensor 'w': duplicate key 'dtype'"});
}

TEST_F(SafetensorsTest, DetectsBadChecksumMetadata) {
  const std::string t = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_corrupt_header(R"({"__metadata__":{"canonlab.data_checksum":"0123456789abcdef"},)" + t + "}", 4,
                        {"only one of"});
  expect_corrupt_header(R"({"__metadata__":{"canonlab.checksum_algo":"xxh64"},)" + t + "}", 4, {"only one of"});
  expect_corrupt_header(
      R"({"__metadata__":{"canonlab.checksum_algo":"md5","canonlab.data_checksum":"0123456789abcdef"},)" + t + "}", 4,
      {"unsupported checksum algorithm 'md5'"});
  expect_corrupt_header(R"({"__metadata__":{"canonlab.checksum_algo":"xxh64","canonlab.data_checksum":"xyz"},)" + t + "}",
                        4, {"not 16 lowercase hex digits"});
}

// ---- Atomic writes ---------------------------------------------------------------------------------------

std::vector<std::byte> file_bytes_small(float v) {
  static std::vector<float> data;
  data.assign(16, v);
  SafetensorsWriter w;
  w.add("w", data, {4, 4});
  return w.serialize();
}

// A writer killed at any point (after the header, mid-data, after the last byte but before the rename)
// leaves the previous checkpoint byte-identical and readable.
TEST_F(SafetensorsTest, KilledWriteLeavesPreviousFileIntact) {
  const std::string path = file("ckpt.safetensors");
  std::vector<float> old_data(1000, 0.5f);
  SafetensorsWriter old_writer;
  old_writer.add_metadata("canonlab.format_version", "1");
  old_writer.add("w", old_data, {1000});
  old_writer.write_atomic(path);
  const std::vector<std::byte> old_bytes = read_file(path);

  const size_t n_new = size_t(4) << 20;  // 16 MiB of data, written in 1 MiB chunks
  std::vector<float> new_data(n_new, 2.0f);
  SafetensorsWriter new_writer;
  new_writer.add("w", new_data, {int64_t(n_new)});
  const uint64_t total = new_writer.serialize().size();

  for (uint64_t kill_at : {uint64_t(1), total / 2, total}) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      AtomicWriteOptions opts;
      opts.after_write = [kill_at](uint64_t written) {
        if (written >= kill_at) ::raise(SIGKILL);  // as abrupt as a crash: no destructors, no cleanup
      };
      try {
        new_writer.write_atomic(path, opts);
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);  // reached only if the hook never fired: the parent reports it
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer was not killed at byte " << kill_at;

    EXPECT_EQ(read_file(path), old_bytes) << "killed at byte " << kill_at;
    SafetensorsFile r = read_safetensors(path);
    EXPECT_EQ(r.get("w").to_vector<float>(), old_data);
    // The partial data went to the child's temp file (<path>.tmp.<pid>.<start>), which the crash left behind.
    std::string tmp;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().string().starts_with(path + ".tmp." + std::to_string(pid) + ".")) tmp = e.path().string();
    ASSERT_FALSE(tmp.empty()) << "writer " << pid << " left no temp file";
    EXPECT_GE(fs::file_size(tmp), std::min<uint64_t>(kill_at, total));
    EXPECT_LE(fs::file_size(tmp), total);
  }

  // Stale temp files from the crashes do not get in the way of the next save.
  new_writer.write_atomic(path);
  EXPECT_EQ(read_safetensors(path).get("w").to_vector<float>(), new_data);
}

// A temp file with this process's pid and another start time was left by an earlier process that had the pid: it
// does not disturb a write, and remove_stale_temp_files removes it although the pid is alive.
TEST_F(SafetensorsTest, StaleTempOfAnEarlierProcessWithOurPidIsRemoved) {
  const std::string path = file("stale.safetensors");
  std::string own_temp;
  {
    const AtomicFileWriter unused(path);  // discarded unwritten: only the name of this process's temp file is wanted
    own_temp = unused.temp_path();
  }
  const std::string stale = own_temp + "0";  // the same pid, started at ten times our start time
  write_raw(stale, std::vector<std::byte>(1 << 16, std::byte{0x5a}));
  std::vector<std::byte> bytes = file_bytes_small(3.0f);
  write_file_atomic(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_EQ(remove_stale_temp_files(dir_), 1);
  EXPECT_FALSE(fs::exists(stale));
}

TEST_F(SafetensorsTest, FailedWriteRemovesTempAndKeepsTarget) {
  const std::string path = file("keep.safetensors");
  std::vector<std::byte> old_bytes = file_bytes_small(1.0f);
  write_file_atomic(path, old_bytes);
  auto only_target_left = [&] {
    for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().string(), path) << "leftover file";
  };

  // The producer fails mid-write (an exception from the hook stands in for any error while streaming).
  std::vector<std::byte> big(3 << 20, std::byte{1});
  AtomicWriteOptions opts;
  opts.after_write = [](uint64_t written) {
    if (written >= (1 << 20)) throw std::runtime_error("producer failed");
  };
  EXPECT_THROW(write_file_atomic(path, big, opts), std::runtime_error);
  EXPECT_EQ(read_file(path), old_bytes);
  only_target_left();

  // The rename fails: the target is a directory.
  const std::string as_dir = file("dir.safetensors");
  fs::create_directory(as_dir);
  try {
    write_file_atomic(as_dir, old_bytes);
    ADD_FAILURE() << "rename over a directory succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(as_dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(EISDIR)), std::string::npos) << e.what();
  }
  fs::remove(as_dir);
  only_target_left();

  // The directory does not exist: errno text in the message.
  try {
    write_file_atomic(file("missing/x.safetensors"), old_bytes);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENOENT)), std::string::npos) << e.what();
  }
  try {
    read_file(file("missing.safetensors"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENOENT)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace canonlab
