// The TensorBoard events of summaries.h. The plugin names and tags are TensorBoard's: "text" for text summaries
// (a DT_STRING scalar tensor), "hparams" with the tags _hparams_/session_start_info and _hparams_/session_end_info
// (HParamsPluginData version 0, carried in the metadata over an empty DT_FLOAT tensor).
#include "io/tensorboard/summaries.h"

#include "io/tensorboard/event_file.h"

namespace canonlab::tensorboard {

namespace {

Event summary_event(double wall_time, int64_t step) {
  Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  e.mutable_summary();
  return e;
}

Event hparams_event(double wall_time, const std::string& tag, const HParamsPluginData& data) {
  Event e = summary_event(wall_time, 0);
  Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  SummaryMetadata::PluginData* plugin = v->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(serialize(data));
  TensorProto* null_tensor = v->mutable_tensor();
  null_tensor->set_dtype(DT_FLOAT);
  null_tensor->mutable_tensor_shape()->add_dim()->set_size(0);
  return e;
}

}  // namespace

Event scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  Event e = summary_event(wall_time, step);
  Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  return e;
}

Event text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  Event e = summary_event(wall_time, step);
  Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  TensorProto* t = v->mutable_tensor();
  t->set_dtype(DT_STRING);
  t->mutable_tensor_shape();  // a scalar
  t->add_string_val(markdown);
  return e;
}

Event image_event(double wall_time, int64_t step, const std::string& tag, const RgbImage& image) {
  Event e = summary_event(wall_time, step);
  Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  Summary::Image* img = v->mutable_image();
  img->set_height(image.height);
  img->set_width(image.width);
  img->set_colorspace(3);
  img->set_encoded_image_string(encode_png(image));
  return e;
}

Event restart_event(double wall_time, int64_t step) {
  Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  e.mutable_session_log()->set_status(SessionLog::START);
  return e;
}

Event session_start_event(double wall_time, const std::map<std::string, HParamValue>& hparams,
                          const std::string& group_name) {
  HParamsPluginData data;
  data.set_version(0);
  SessionStartInfo* info = data.mutable_session_start_info();
  for (const auto& [name, value] : hparams) {
    Value& v = (*info->mutable_hparams())[name];
    if (const auto* s = std::get_if<std::string>(&value)) v.set_string_value(*s);
    else if (const auto* d = std::get_if<double>(&value)) v.set_number_value(*d);
    else v.set_bool_value(std::get<bool>(value));
  }
  info->set_group_name(group_name);
  info->set_start_time_secs(wall_time);
  return hparams_event(wall_time, "_hparams_/session_start_info", data);
}

Event session_end_event(double wall_time, bool success) {
  HParamsPluginData data;
  data.set_version(0);
  SessionEndInfo* info = data.mutable_session_end_info();
  info->set_status(success ? STATUS_SUCCESS : STATUS_FAILURE);
  info->set_end_time_secs(wall_time);
  return hparams_event(wall_time, "_hparams_/session_end_info", data);
}

}  // namespace canonlab::tensorboard
