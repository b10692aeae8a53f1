#pragma once
// TensorBoard event files: serialized Event messages (tensorboard.proto, written by proto_writer.h) in TFRecord
// framing, each record
//   uint64 length (little-endian) | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. The file is named events.out.tfevents.<seconds>.<host>
// (TensorBoard's pattern: it reads every file whose name holds "tfevents", oldest name first).
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>


namespace canonlab::tensorboard {

// One serialized Event message (tensorboard.proto; built by summaries.h).
struct Event {
  std::string bytes;
};

// CRC-32C (Castagnoli) of `data`, and its masked form that TFRecord stores (Boost.CRC computes it).
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One framed record holding `data`.
std::string framed_record(std::string_view data);
// The framed records of `events`, in order: a whole file's bytes.
std::string framed_events(const std::vector<Event>& events);

// "events.out.tfevents.<seconds since the epoch, 10 digits>.<host name>.<suffix>".
std::string event_file_name(double wall_time, const std::string& suffix);

// The first event of every file: file_version "brain.Event:2".
Event file_version_event(double wall_time);

// An event file opened for appending. Every write is one whole record followed by a flush, so a run killed at any
// moment leaves a file whose records up to the last are whole (TensorBoard ignores a torn last record); a failed
// write (a full disk) throws canonlab::Error naming the file.
class EventFile {
 public:
  explicit EventFile(std::string path);
  void write(const Event& event);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace canonlab::tensorboard
