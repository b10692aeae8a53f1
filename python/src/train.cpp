// canonlab._core.train and friends: the steps of `canonlab train` (src/cli/cmd_train.cpp) in this process, so that
// a Python callback sees every metrics record as it is written. Same config loading, estimate, refusal and run
// directory rules as the CLI, hence the same errors.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <csignal>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "bindings.h"
#include "config/config.h"
#include "engine/error.h"
#include "train/resource_estimate.h"
#include "train/trainer.h"

namespace canonlab::python {

namespace {

// A config from a YAML file or from YAML text (the Python API passes a dict as its JSON, which is YAML), with the
// --set style overrides applied.
RunConfig resolve(const std::optional<std::string>& path, const std::optional<std::string>& text,
                  const std::vector<std::string>& overrides) {
  CANONLAB_CHECK(path.has_value() != text.has_value(), "give a config file or a config dict, not both or neither");
  return path ? load_config(*path, overrides) : config_from_yaml_string(*text, overrides);
}

// Raised to Python as canonlab.Stopped (a KeyboardInterrupt): the run stopped with a checkpoint.
struct StoppedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string train(const std::optional<std::string>& path, const std::optional<std::string>& text,
                  const std::vector<std::string>& overrides, const std::string& out, bool resume, bool force,
                  bool progress, nb::object on_metrics) {
  const RunConfig cfg = resolve(path, text, overrides);
  check_resources(estimate_resources(cfg, resume ? Purpose::resume : Purpose::train), cfg);
  TrainOptions opt;
  opt.out_dir = out;
  opt.resume = resume;
  opt.force = force;
  opt.progress = progress;
  if (!on_metrics.is_none())
    opt.on_metrics = [&on_metrics](const nlohmann::json& record) {
      nb::gil_scoped_acquire locked;
      on_metrics(record.dump());
    };
  nlohmann::json summary;
  try {
    nb::gil_scoped_release unlocked;
    summary = train(cfg, opt);
  } catch (const StoppedBySignal& stop) {
    throw StoppedError("stopped by " + signal_name(stop.signal) + ": checkpoint at step " + std::to_string(stop.step) +
                       " written to " + out + "/checkpoints; continue with resume=True");
  }
  return summary.dump();
}

}  // namespace

void bind_train(nb::module_& m) {
  nb::exception<StoppedError>(m, "Stopped", PyExc_KeyboardInterrupt);
  m.def("train", &train, nb::arg("path").none(), nb::arg("text").none(), nb::arg("overrides"), nb::arg("out"),
        nb::arg("resume"), nb::arg("force"), nb::arg("progress"), nb::arg("on_metrics").none(),
        "Trains as `canonlab train`; returns summary.json's text. on_metrics(record_json) sees every metrics record");
  m.def(
      "resolve_config",
      [](const std::optional<std::string>& path, const std::optional<std::string>& text,
         const std::vector<std::string>& overrides) { return config_to_json(resolve(path, text, overrides)).dump(); },
      nb::arg("path").none(), nb::arg("text").none(), nb::arg("overrides"),
      "The resolved config (every key, defaults filled in) as JSON text");
  m.def(
      "dry_run",
      [](const std::optional<std::string>& path, const std::optional<std::string>& text,
         const std::vector<std::string>& overrides, bool resume) {
        const RunConfig cfg = resolve(path, text, overrides);
        const ResourceEstimate estimate = estimate_resources(cfg, resume ? Purpose::resume : Purpose::train);
        const TimeEstimate time = estimate_time(estimate, cfg);
        std::string text_out = format_estimate(estimate, cfg, &time);
        check_resources(estimate, cfg);  // a config that would be refused raises, as `train --dry-run` exits 2
        return text_out;
      },
      nb::arg("path").none(), nb::arg("text").none(), nb::arg("overrides"), nb::arg("resume") = false,
      "The --dry-run estimate (memory, parameters, FLOPs, time) as text");
}

}  // namespace canonlab::python
