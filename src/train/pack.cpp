#include "train/pack.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>

#include "data/task.h"
#include "engine/error.h"
#include "train/resource_estimate.h"

namespace canonlab {

namespace {

struct Member {
  std::unique_ptr<TrainingRun> run;  // null once it has ended
  PackRunResult result;
};

// Ends a member's run with `end`, releasing its memory and its run directory.
void end_run(Member& m, PackRunEnd end, std::string error) {
  m.result.end = end;
  m.result.error = std::move(error);
  if (m.run) m.result.steps_done = m.run->steps_done();
  m.run.reset();
}

// One step of a member, its ends caught: nothing thrown by one run reaches the others.
void step_member(Member& m) {
  try {
    m.run->step();
  } catch (const StoppedBySignal& stop) {
    end_run(m, PackRunEnd::interrupted, "stopped by signal " + std::to_string(stop.signal) + ", checkpoint written");
    m.result.steps_done = stop.step;
  } catch (const std::exception& e) {
    end_run(m, PackRunEnd::failed, e.what());
  } catch (...) {
    end_run(m, PackRunEnd::failed, "unknown error");
  }
}

}  // namespace

int pack_width(const std::vector<PackMember>& members, int cores) {
  if (members.empty()) return 1;
  const int threads = std::max(1, members.front().config.train.threads);
  return std::clamp(cores / threads, 1, int(members.size()));
}

std::vector<PackRunResult> train_pack(std::vector<PackMember> members, const StopSignals& stop_signals, int width) {
  CANONLAB_CHECK(width >= 1, "pack width must be at least 1, got " + std::to_string(width));
  if (width > 1)
    for (const PackMember& p : members)
      CANONLAB_CHECK(p.config.train.threads == 1,
                     "run '" + p.options.out_dir + "': train.threads is " + std::to_string(p.config.train.threads) +
                         "; runs that step side by side in a pack train one thread each (train.threads: 1), or the "
                         "pack steps them one at a time");
  std::vector<Member> pack(members.size());
  for (size_t i = 0; i < members.size(); i++) {
    members[i].options.progress = false;
    members[i].options.stop_signals = &stop_signals;
    try {
      pack[i].run = std::make_unique<TrainingRun>(members[i].config, members[i].options, stop_signals);
    } catch (const std::exception& e) {
      end_run(pack[i], PackRunEnd::failed, e.what());
    }
  }
  for (;;) {
    // Members that finished their steps write their summaries one at a time (the probe prints its table).
    for (Member& m : pack) {
      if (!m.run || !m.run->all_steps_done()) continue;
      try {
        m.result.summary = m.run->finish();
        end_run(m, PackRunEnd::done, "");
      } catch (const std::exception& e) {
        end_run(m, PackRunEnd::failed, e.what());
      }
    }
    std::vector<Member*> live;
    for (Member& m : pack)
      if (m.run) live.push_back(&m);
    if (live.empty()) break;
    // One step of every live run. Side by side, each run's kernels run in its own thread: nested OpenMP regions get
    // one thread and oneDNN runs a GEMM called inside a parallel region single-threaded, as at train.threads 1.
    const int n = int(live.size());
    if (width == 1) {
      for (Member* m : live) step_member(*m);
    } else {
#pragma omp parallel for num_threads(std::min(width, n)) schedule(dynamic, 1)
      for (int i = 0; i < n; i++) {
        omp_set_num_threads(1);
        step_member(*live[size_t(i)]);
      }
    }
  }
  std::vector<PackRunResult> results;
  results.reserve(pack.size());
  for (Member& m : pack) results.push_back(std::move(m.result));
  return results;
}

std::string pack_signature(const RunConfig& config) {
  const TrainConfig& tc = config.train;
  std::string signature = "device=" + tc.device + " precision=" + tc.precision + " threads=" +
                          std::to_string(tc.threads) + " batch=" + std::to_string(tc.batch_size) + " micro_batches=" +
                          std::to_string(tc.micro_batches) + " window=" + std::to_string(make_task(config.task)->seq_len());
  for (const ParamInfo& p : parameter_layout(config.model)) {
    signature += " " + p.name + "(";
    for (size_t d = 0; d < p.shape.size(); d++) signature += (d ? "," : "") + std::to_string(p.shape[d]);
    signature += ")";
  }
  return signature;
}

}  // namespace canonlab
