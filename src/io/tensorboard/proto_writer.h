#pragma once
// Protocol-buffer wire format, writing only (protobuf.dev, "Encoding"): each field is a key (field number << 3 |
// wire type) followed by a varint (0), 8 little-endian bytes (1), a length and the bytes (2: strings, bytes, nested
// messages, packed repeated scalars) or 4 little-endian bytes (5). Enough for the messages of tensorboard.proto.
//
// Why not libprotobuf: Debian's libsentencepiece.so.0 (our tokenizers) embeds and exports its own protobuf-lite.
// With Debian's libprotobuf.so.32 in the same process the loader bound libprotobuf's calls to sentencepiece's copy
// and canonlab crashed before main (descriptor registration); libprotobuf-lite.a linked statically with its symbols
// hidden works for the executables but cannot go into the Python module (its arena code uses initial-exec TLS,
// R_X86_64_TPOFF32, which a shared object cannot hold). The bytes are checked against TensorBoard's own parser
// (tests/python/test_tensorboard.py) and against the format written out by hand (tests/unit/test_tensorboard.cpp).
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace canonlab::tensorboard {

class ProtoWriter {
 public:
  // int32, int64, uint64, bool, enum: a varint (negative int32/int64 as their 64-bit two's complement, as protobuf).
  ProtoWriter& varint(int field, uint64_t value) {
    key(field, 0);
    put_varint(value);
    return *this;
  }
  ProtoWriter& float64(int field, double value) {
    key(field, 1);
    put_le(value);
    return *this;
  }
  ProtoWriter& float32(int field, float value) {
    key(field, 5);
    put_le(value);
    return *this;
  }
  // string, bytes, or a nested message's bytes (ProtoWriter::bytes()).
  ProtoWriter& bytes(int field, std::string_view value) {
    key(field, 2);
    put_varint(value.size());
    out_.append(value);
    return *this;
  }
  ProtoWriter& message(int field, const ProtoWriter& nested) { return bytes(field, nested.out_); }
  const std::string& bytes() const { return out_; }

 private:
  void key(int field, int wire_type) { put_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
  void put_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(char(v & 0x7f | 0x80));
      v >>= 7;
    }
    out_.push_back(char(v));
  }
  template <class T>
  void put_le(T value) {  // x86-64 and every platform canonlab builds on are little-endian
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out_.append(raw, sizeof(T));
  }
  std::string out_;
};

}  // namespace canonlab::tensorboard
