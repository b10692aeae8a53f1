#pragma once
// A run's TensorBoard event file, RUN_DIR/tb/events.out.tfevents.* (log.tensorboard, on by default): every metrics
// record's numbers as scalars at its step ("train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s",
// "eval/loss", "eval/<task metric>"), the resolved config as text, and at the end the IPMR table as text and as a
// heatmap per delta. `tensorboard --logdir RUN_DIR` (or a sweep's directory) shows them while the run trains.
//
// The same discipline as metrics.jsonl: each record is written whole and flushed (a killed run leaves a readable
// file), a full disk stops the run naming the file, and a resume rebuilds the file from the metrics records it keeps
// (those of the checkpoint's steps), so every step is in it once. The rebuilt file is written atomically before the
// older ones are removed and starts with a SessionLog START at step 0, which makes TensorBoard drop whatever an older
// file still held should a kill come between the two.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/attention_maps.h"
#include "eval/ipmr.h"
#include "io/png.h"

namespace canonlab {

namespace tensorboard {
class EventFile;
}

class TensorBoardLog {
 public:
  // run_dir: the run directory (the file goes to run_dir/tb/). kept: the metrics records of the steps the run starts
  // from (empty for a fresh run); config_yaml: config.resolved.yaml's text.
  TensorBoardLog(const std::string& run_dir, const std::vector<nlohmann::json>& kept, const std::string& config_yaml);
  ~TensorBoardLog();
  TensorBoardLog(TensorBoardLog&&) noexcept;
  // One metrics record ({"step", "split", numbers...}): a scalar per number.
  void write(const nlohmann::json& record);
  // The probe's IPMR at the run's last step: the table as text and a layer x head heatmap per delta.
  void write_ipmr(int step, const IpmrResult& ipmr, const std::string& table_text);
  const std::string& path() const;

 private:
  // The event layer stays behind this pointer: only tensorboard_log.cpp includes src/io/tensorboard/.
  std::unique_ptr<tensorboard::EventFile> file_;
};

// `canonlab probe` on a run: the attention maps of its chosen heads as images at the checkpoint's step
// ("probe/attention/ex<example>/<L#H#>", T x T, row = query), in a file of its own beside the run's
// (RUN_DIR/tb/events.out.tfevents.<time>.<host>.canonlab-probe), which replaces an earlier probe's file.
void write_probe_pictures(const std::string& run_dir, int step, const AttentionMaps& maps);

// A heatmap of `rates` (rows x cols, row-major, values in [0, 1]), each cell a `cell` x `cell` square of a
// perceptually ordered colour map (dark blue 0 to yellow 1), cells parted by a 1-pixel grid.
RgbImage heatmap_image(const std::vector<double>& rates, int rows, int cols, int cell);

}  // namespace canonlab
