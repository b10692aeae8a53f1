#include "sweep/tensorboard_hparams.h"

#include <filesystem>

#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/strict_number.h"
#include "io/tensorboard/event_file.h"
#include "io/tensorboard/summaries.h"

namespace canonlab {

namespace fs = std::filesystem;
namespace tb = tensorboard;

void write_tensorboard_hparams(const std::string& sweep_dir, const std::vector<SweepRun>& runs) {
  for (const SweepRun& run : runs) {
    if (!run.config.log.tensorboard) continue;
    std::map<std::string, tb::HParamValue> hparams;
    for (const auto& [axis, label] : run.labels) {
      if (const std::optional<double> number = parse_finite_double(label)) hparams[axis] = *number;
      else hparams[axis] = label;
    }
    const std::string text = tb::framed_events({tb::file_version_event(0), tb::session_start_event(0, hparams, "")});
    const fs::path path = fs::path(sweep_dir) / "runs" / run.name / kHparamsEventFile;
    create_directories_at(path.parent_path(), "cannot create run directory");
    if (read_text_if_exists(path.string(), "TensorBoard hparams file") != text) write_text_atomic(path.string(), text);
  }
}

}  // namespace canonlab
