#pragma once
// A sweep as one TensorBoard experiment (`tensorboard --logdir SWEEP_DIR`): each run directory gets an event file
// with the HParams plugin's session record, its hyperparameters being the sweep's axes (name -> the run's label, a
// number where the label reads as one). TensorBoard's HParams dashboard then lists one row per run with the axes as
// columns and, as metric columns, the scalars the run writes to RUN_DIR/tb/ (train/tensorboard_log.h). The scalar
// dashboards name each run by its directory, runs/<axis=label__...>/tb.
#include <string>
#include <vector>

#include "sweep/sweep_spec.h"

namespace canonlab {

// Writes SWEEP_DIR/runs/<run>/events.out.tfevents.0000000000.canonlab-hparams for every run with log.tensorboard
// on, atomically and only where its content changed (it is the same for the same grid: no time in it).
void write_tensorboard_hparams(const std::string& sweep_dir, const std::vector<SweepRun>& runs);

// The file's name.
inline constexpr const char* kHparamsEventFile = "events.out.tfevents.0000000000.canonlab-hparams";

}  // namespace canonlab
