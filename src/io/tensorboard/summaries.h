#pragma once
// The events canonlab writes to TensorBoard: scalars, text (markdown), images, the HParams plugin's session records
// and the restart marker. Each returns one Event (the fields of tensorboard.proto, named in the comments of
// summaries.cpp) for EventFile::write or framed_events.
#include <map>
#include <string>
#include <variant>

#include "io/png.h"
#include "io/tensorboard/event_file.h"

namespace canonlab::tensorboard {

Event scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
// Markdown, shown by the Text dashboard.
Event text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown);
Event image_event(double wall_time, int64_t step, const std::string& tag, const RgbImage& image);

// SessionLog START at `step`: TensorBoard drops this run's events at `step` or later read from earlier files.
Event restart_event(double wall_time, int64_t step);

// The HParams plugin's session of one run: its hyperparameters (a sweep's axes), strings, numbers or booleans.
using HParamValue = std::variant<std::string, double, bool>;
Event session_start_event(double wall_time, const std::map<std::string, HParamValue>& hparams,
                          const std::string& group_name);
Event session_end_event(double wall_time, bool success);

}  // namespace canonlab::tensorboard
