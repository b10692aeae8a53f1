// TFRecord framing of TensorBoard's event files (event_file.h).
#include "io/tensorboard/event_file.h"

#include "io/tensorboard/proto_writer.h"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cstdio>

#include "engine/error.h"

namespace canonlab::tensorboard {

uint32_t crc32c(std::string_view data) {
  // CRC-32C: polynomial 0x1EDC6F41, initial value and final xor 0xFFFFFFFF, reflected in and out.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace {

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; i++) out.push_back(char((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string framed_record(std::string_view data) {
  std::string length;
  append_le(length, data.size(), 8);
  std::string out = length;
  append_le(out, masked_crc32c(length), 4);
  out.append(data);
  append_le(out, masked_crc32c(data), 4);
  return out;
}

std::string framed_events(const std::vector<Event>& events) {
  std::string out;
  for (const Event& e : events) out += framed_record(e.bytes);
  return out;
}

std::string event_file_name(double wall_time, const std::string& suffix) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(wall_time));
  return std::string("events.out.tfevents.") + seconds + "." + host + "." + suffix;
}

Event file_version_event(double wall_time) {
  // Event: wall_time = 1, file_version = 3
  return {ProtoWriter().float64(1, wall_time).bytes(3, "brain.Event:2").bytes()};
}

EventFile::EventFile(std::string path) : path_(std::move(path)) {
  out_.open(path_, std::ios::binary | std::ios::app);
  CANONLAB_CHECK(out_, "cannot open the TensorBoard event file '" + path_ + "' for appending");
}

void EventFile::write(const Event& event) {
  const std::string record = framed_record(event.bytes);
  out_.write(record.data(), std::streamsize(record.size()));
  out_.flush();
  CANONLAB_CHECK(out_, "cannot write to the TensorBoard event file '" + path_ + "' (disk full or file removed?)");
}

}  // namespace canonlab::tensorboard
