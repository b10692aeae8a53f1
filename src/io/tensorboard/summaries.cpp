// The TensorBoard events of summaries.h, field by field as tensorboard.proto declares them. The plugin names and tags
// are TensorBoard's: "text" for text summaries (a DT_STRING scalar tensor), "hparams" with the tags
// _hparams_/session_start_info and _hparams_/session_end_info (HParamsPluginData, version 0, carried in the
// metadata over an empty DT_FLOAT tensor, as TensorBoard's own hparams summaries are).
#include "io/tensorboard/summaries.h"

#include "io/tensorboard/proto_writer.h"

namespace canonlab::tensorboard {

namespace {

constexpr int kDtFloat = 1, kDtString = 7;  // DataType
constexpr int kRgb = 3;                     // Summary.Image.colorspace

// Event { wall_time = 1, step = 2, summary = 5 { value = 1 } } around one Summary.Value.
Event summary_event(double wall_time, int64_t step, const ProtoWriter& value) {
  ProtoWriter summary;
  summary.message(1, value);
  ProtoWriter event;
  event.float64(1, wall_time);
  if (step != 0) event.varint(2, uint64_t(step));
  event.message(5, summary);
  return {event.bytes()};
}

// SummaryMetadata { plugin_data = 1 { plugin_name = 1, content = 2 } }
ProtoWriter plugin_metadata(std::string_view plugin, std::string_view content) {
  ProtoWriter data;
  data.bytes(1, plugin);
  if (!content.empty()) data.bytes(2, content);
  ProtoWriter metadata;
  metadata.message(1, data);
  return metadata;
}

// HParamsPluginData (version = 1: 0, omitted) with `data` at `field` (3 session_start_info, 4 session_end_info).
Event hparams_event(double wall_time, const std::string& tag, int field, const ProtoWriter& data) {
  ProtoWriter plugin_data;
  plugin_data.message(field, data);
  // TensorProto { dtype = 1: DT_FLOAT, tensor_shape = 2 { dim = 2 { size = 1: 0 } } }: the empty tensor.
  ProtoWriter dim, shape, tensor;
  shape.message(2, dim);
  tensor.varint(1, kDtFloat).message(2, shape);
  ProtoWriter value;  // Summary.Value { tag = 1, metadata = 9, tensor = 8 }
  value.bytes(1, tag).message(9, plugin_metadata("hparams", plugin_data.bytes())).message(8, tensor);
  return summary_event(wall_time, 0, value);
}

}  // namespace

Event scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  ProtoWriter v;  // Summary.Value { tag = 1, simple_value = 2 }
  v.bytes(1, tag).float32(2, value);
  return summary_event(wall_time, step, v);
}

Event text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  // TensorProto { dtype = 1: DT_STRING, tensor_shape = 2: {} (a scalar), string_val = 8 }
  ProtoWriter tensor;
  tensor.varint(1, kDtString).bytes(2, "").bytes(8, markdown);
  ProtoWriter v;  // Summary.Value { tag = 1, metadata = 9, tensor = 8 }
  v.bytes(1, tag).message(9, plugin_metadata("text", "")).message(8, tensor);
  return summary_event(wall_time, step, v);
}

Event image_event(double wall_time, int64_t step, const std::string& tag, const RgbImage& image) {
  ProtoWriter img;  // Summary.Image { height = 1, width = 2, colorspace = 3, encoded_image_string = 4 }
  img.varint(1, uint64_t(image.height)).varint(2, uint64_t(image.width)).varint(3, kRgb).bytes(4, encode_png(image));
  ProtoWriter v;  // Summary.Value { tag = 1, image = 4 }
  v.bytes(1, tag).message(4, img);
  return summary_event(wall_time, step, v);
}

Event restart_event(double wall_time, int64_t step) {
  ProtoWriter log;  // SessionLog { status = 1: START (1) }
  log.varint(1, 1);
  ProtoWriter event;  // Event { wall_time = 1, step = 2, session_log = 7 }
  event.float64(1, wall_time);
  if (step != 0) event.varint(2, uint64_t(step));
  event.message(7, log);
  return {event.bytes()};
}

Event session_start_event(double wall_time, const std::map<std::string, HParamValue>& hparams,
                          const std::string& group_name) {
  // SessionStartInfo { hparams = 1 (map<string, google.protobuf.Value>), group_name = 4, start_time_secs = 5 }; a map
  // entry is a message { key = 1, value = 2 }, in key order here (std::map), so the bytes are the same every time.
  ProtoWriter info;
  for (const auto& [name, value] : hparams) {
    ProtoWriter v;  // google.protobuf.Value { number_value = 2, string_value = 3, bool_value = 4 }
    if (const auto* s = std::get_if<std::string>(&value)) v.bytes(3, *s);
    else if (const auto* d = std::get_if<double>(&value)) v.float64(2, *d);
    else v.varint(4, std::get<bool>(value) ? 1 : 0);
    ProtoWriter entry;
    entry.bytes(1, name).message(2, v);
    info.message(1, entry);
  }
  if (!group_name.empty()) info.bytes(4, group_name);
  if (wall_time != 0) info.float64(5, wall_time);
  return hparams_event(wall_time, "_hparams_/session_start_info", 3, info);
}

Event session_end_event(double wall_time, bool success) {
  ProtoWriter info;  // SessionEndInfo { status = 1: STATUS_SUCCESS (1) or STATUS_FAILURE (2), end_time_secs = 2 }
  info.varint(1, success ? 1 : 2).float64(2, wall_time);
  return hparams_event(wall_time, "_hparams_/session_end_info", 4, info);
}

}  // namespace canonlab::tensorboard
