#pragma once
// Whether a directory already holds a run, for `canonlab train` without --resume. A fresh run writes
// config.resolved.yaml, metrics.jsonl, metrics.csv, checkpoints/ and summary.json, so starting one where an earlier
// run's results lie would replace them without a word (a finished run kept without checkpoints/, as the committed
// study runs are, has no latest.json to notice). Such a directory is refused unless --force, which moves the earlier
// run's files to RUN_DIR/superseded/<time>/: nothing is deleted, as with `canonlab sweep --force`.
#include <filesystem>
#include <string>
#include <vector>

namespace canonlab {

// The entries of run_dir that hold an earlier run's results, in this order: "summary.json", "metrics.jsonl" and
// "metrics.csv" (with at least one record), "checkpoints/" (with anything but the step-0 files, the initial weights
// that a kill during the first save leaves without latest.json) and "probe/" (not empty). Empty when there are none:
// config.resolved.yaml, empty metrics files and step-0 files (what an attempt that ended before recording anything
// leaves) are no results. Files of other programs (a sweep's run.yaml, status.json, train.log) never count.
std::vector<std::string> earlier_run_results(const std::string& run_dir);

// Called by `canonlab train` on run_dir while it holds RUN_DIR/.train.lock, before writing anything there, and after
// removing dead writers' temp files (which are no results). With `resume` there is nothing to check (the checkpoint
// is validated when it is loaded). Otherwise a directory with earlier results is refused with a canonlab::Error that
// names them and the ways on (--resume when it has a checkpoint, another --out, --force); with `force` the earlier
// run's files (the results and its config.resolved.yaml) move to run_dir/superseded/<time>/, said on stderr.
// `resume` and `force` together are refused: one continues the run, the other starts afresh.
void claim_run_directory(const std::string& run_dir, bool resume, bool force);

// parent/<seconds since the epoch>, or parent/<seconds>-<n> when that exists (two --force within one second): where
// files of a replaced run go. Nothing is created.
std::filesystem::path unused_superseded_directory(const std::filesystem::path& parent);

}  // namespace canonlab
