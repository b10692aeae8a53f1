#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "config/config.h"
#include "engine/backend/make_backend.h"
#include "engine/ops/linear/bf16.h"
#include "engine/threads.h"
#include "eval/evaluate.h"
#include "eval/probe.h"
#include "io/atomic_file.h"
#include "io/directory_lock.h"
#include "io/safetensors.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/batch_prefetch.h"
#include "train/checkpoint.h"
#include "train/progress.h"
#include "train/run_directory.h"
#include "train/schedule.h"
#include "train/step.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Metrics go to metrics.jsonl (every record) and metrics.csv (a flat table of the same records).
class MetricsLog {
 public:
  MetricsLog(const std::string& dir, int keep_up_to_step, std::vector<std::string> task_metrics)
      : jsonl_path_(dir + "/metrics.jsonl"), csv_path_(dir + "/metrics.csv"), task_metrics_(std::move(task_metrics)) {
    // On resume, keep only the records of steps the checkpoint already covers, so the files read as if the run
    // had never been interrupted. Both files are replaced atomically (the kept records go to a temporary file
    // that is renamed over the old one) and only after every kept record was read: a bad record, an error or a
    // kill at any moment leaves the old file or the new one, never a truncated one.
    const std::vector<nlohmann::json> kept =
        keep_up_to_step > 0 ? read_records(jsonl_path_, keep_up_to_step) : std::vector<nlohmann::json>{};
    std::string jsonl_text, csv_text = csv_header();
    for (const nlohmann::json& j : kept) {
      jsonl_text += j.dump() + "\n";
      csv_text += csv_line(j);
      if (j.contains("split") && j["split"] == "train" && j.contains("loss") && j["loss"].is_number())
        last_train_loss_ = j["loss"].get<double>();
    }
    write_text_atomic(jsonl_path_, jsonl_text);
    write_text_atomic(csv_path_, csv_text);
    jsonl_.open(jsonl_path_, std::ios::app);
    csv_.open(csv_path_, std::ios::app);
    CANONLAB_CHECK(jsonl_ && csv_, "cannot open '" + jsonl_path_ + "' and '" + csv_path_ + "' for appending");
  }
  // The newest training loss already on file: what the summary reports when a resume starts at the last step.
  double last_train_loss() const { return last_train_loss_; }
  void write(const nlohmann::json& j) {
    jsonl_ << j.dump() << "\n";
    csv_ << csv_line(j);
    jsonl_.flush();
    csv_.flush();
    // A full disk must stop the run rather than silently drop its metrics.
    CANONLAB_CHECK(jsonl_ && csv_, "cannot write metrics to '" + jsonl_path_ + "' (disk full or file removed?)");
  }

 private:
  // The records of metrics.jsonl up to `last_step`. A last line without its newline is what a kill during a write
  // leaves; it belongs to a step after the checkpoint and is dropped. Any other line that is not a record stops
  // the resume with the file and line named, before anything is changed.
  static std::vector<nlohmann::json> read_records(const std::string& path, int last_step) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return {};
    const std::string text = read_text_file(path, kMaxMetricsBytes, "metrics file");
    std::vector<nlohmann::json> kept;
    size_t start = 0;
    for (int line = 1; start < text.size(); line++) {
      const size_t newline = text.find('\n', start);
      if (newline == std::string::npos) break;  // unterminated last line: an interrupted write
      const std::string_view record(text.data() + start, newline - start);
      start = newline + 1;
      if (record.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
      const bool has_step = j.is_object() && j.contains("step") && j["step"].is_number_integer();
      if (!has_step)
        throw Error("'" + path + "' line " + std::to_string(line) + ": " +
                    (j.is_discarded() ? "not valid JSON" : "not a metrics record (a JSON object with an integer step)") +
                    ": " + std::string(record.substr(0, 80)) + (record.size() > 80 ? "..." : "") +
                    "; nothing was changed: fix or delete that line, then resume again");
      if (j["step"].get<int64_t>() <= last_step) kept.push_back(j);
    }
    return kept;
  }

  std::string csv_header() const {
    std::string out = "step,split,loss,lr,grad_norm,";
    for (const std::string& m : task_metrics_) out += m + ",";
    return out + "tokens_per_s,elapsed_s\n";
  }

  std::string csv_line(const nlohmann::json& j) const {
    auto num = [&](const std::string& k) { return j.contains(k) ? j[k].dump() : std::string(); };
    const nlohmann::json split = j.value("split", nlohmann::json());
    std::string out = num("step") + "," + (split.is_string() ? split.get<std::string>() : "") + "," + num("loss") +
                      "," + num("lr") + "," + num("grad_norm") + ",";
    for (const std::string& m : task_metrics_) out += num(m) + ",";
    return out + num("tokens_per_s") + "," + num("elapsed_s") + "\n";
  }

  static constexpr uint64_t kMaxMetricsBytes = uint64_t(1) << 32;  // 4 GiB: ~20 M records
  std::string jsonl_path_, csv_path_;
  std::vector<std::string> task_metrics_;
  std::ofstream jsonl_, csv_;
  double last_train_loss_ = NAN;
};

// The run directory (`what`: "run directory", "checkpoint directory"): created if missing, a clear error if it
// cannot be (a file of that name, a read-only disk).
void create_directory(const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error(what + " '" + dir + "' is a file, not a directory; allowed: a directory (created if missing)");
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + what + " '" + dir + "': " + ec.message());
}

// Every rank must train the same run: the same config, the same initial (or resumed) parameters and optimizer
// state. A mismatch (ranks started with different --set, a stale binary on one node) stops before the first step.
void check_ranks_agree(Communicator& comm, const RunConfig& cfg, const ParameterStore<float>& params,
                       int step) {
  if (comm.size() == 1) return;
  const std::string config_text = config_to_json(cfg).dump();
  const std::vector<float> values = params.host_values();
  const uint64_t mine[3] = {xxh64(std::as_bytes(std::span(config_text))), xxh64(std::as_bytes(std::span(values))),
                            uint64_t(step)};
  const std::vector<uint64_t> all = comm.all_gather(std::span<const uint64_t>(mine, 3));
  for (int r = 1; r < comm.size(); r++) {
    const char* what = all[size_t(3 * r)] != all[0] ? "config" : all[size_t(3 * r + 1)] != all[1] ? "parameters"
                       : all[size_t(3 * r + 2)] != all[2] ? "step" : nullptr;
    if (what)
      throw Error(std::string("rank ") + std::to_string(r) + "'s " + what + " differ from rank 0's at the start of the "
                  "run: every rank must run the same binary with the same config and --set overrides");
  }
}

}  // namespace

nlohmann::json train(const RunConfig& cfg, const TrainOptions& options) {
  // Caught from the first line to the last: a signal at any moment either stops the run with a checkpoint or lets
  // it finish, never kills it half-written.
  std::optional<StopSignals> own_stop_signals;
  if (options.stop_signals == nullptr) own_stop_signals.emplace();
  const StopSignals& stop_signals = options.stop_signals ? *options.stop_signals : *own_stop_signals;
  auto phase = [&](std::string_view name, int steps_done) {
    if (options.at_phase) options.at_phase(name, steps_done);
  };
  phase("start", 0);
  const TrainConfig& tc = cfg.train;
  SingleProcess single;
  Communicator& comm = options.comm ? *options.comm : single;
  const bool writer = comm.rank() == 0;  // the one rank that writes the run directory
  check_device_available(tc.device);  // before the run directory exists
  set_thread_count(tc.threads);
  const std::string out = options.out_dir;
  const std::string ckpt_dir = out + "/checkpoints";
  const BatchSplit split = split_batch(tc, comm.size(), comm.rank());
  // Held until the run ends: a second train (or --resume) on this directory would interleave two runs' records.
  std::optional<DirectoryLock> lock;
  if (writer) {
    create_directory(out, "run directory (--out)");
    lock.emplace(out, ".train.lock", "canonlab train");
    // What writers killed mid-write left (a temp file per kill); nobody else writes here while we hold the lock,
    // except a sweep writing status files, whose live writer keeps them.
    remove_stale_temp_files(out);
    remove_stale_temp_files(ckpt_dir);
    claim_run_directory(out, options.resume, options.force);  // an earlier run is refused, or moved aside (--force)
    create_directory(ckpt_dir, "checkpoint directory");
  }
  comm.barrier();  // the other ranks read checkpoints only once rank 0 has checked and cleaned the directory

  auto task = make_task(cfg.task);
  auto model = build_model(cfg);
  ParameterStore<float>& params = model->params();
  AdamWState opt;
  TrainingCursor cursor;
  if (options.resume) {
    cursor = load_latest_checkpoint(ckpt_dir, cfg, params, opt);
    if (writer) std::fprintf(stderr, "resuming from step %d of %s\n", cursor.step, ckpt_dir.c_str());
  }
  check_ranks_agree(comm, cfg, params, cursor.step);
  // Said once, where the user sees it: whether bf16 pays on this CPU (the emulated path is no faster than fp32).
  const std::string bf16_gemm = tc.precision == "bf16" && tc.device == "cpu" ? bf16_path_description() : "";
  if (writer && !bf16_gemm.empty()) std::fprintf(stderr, "train.precision=bf16: %s\n", bf16_gemm.c_str());
  std::optional<MetricsLog> metrics;
  if (writer) {
    write_text_atomic(out + "/config.resolved.yaml", config_to_yaml(cfg));
    metrics.emplace(out, cursor.step, task->metric_names());
  }
  auto log_metrics = [&](const nlohmann::json& record) {
    metrics->write(record);
    if (options.on_metrics) options.on_metrics(record);
  };

  const DeviceBuffer<uint8_t> decay = device_decay_mask(params, tc.decay_on);
  const std::vector<EvalBatch> eval_batches = writer ? make_eval_batches(*task, cfg) : std::vector<EvalBatch>{};
  const int B = tc.batch_size, T = task->seq_len();
  Arena arena(model->backend().memory());
  ActivationTrace<float> trace;
  Progress progress(tc.steps, options.progress && writer, isatty(STDERR_FILENO), task->metric_names().front());

  auto t_start = std::chrono::steady_clock::now();
  double last_loss = writer ? metrics->last_train_loss() : NAN, tokens_done = 0;
  nlohmann::json last_eval;
  // This rank's share of every step: split.micro_batches batches of split.rows sequences (train/step.h), the next
  // step's drawn while this one trains.
  BatchPrefetcher batches(*task, tc.data_seed, split, T, cursor.step, tc.steps, options.prefetch_batches);
  DeviceBuffer<float> folded;  // the running gradient sum between micro-batches
  if (split.micro_batches > 1) folded = DeviceBuffer<float>(params.memory(), params.total());
  if (writer && cursor.step == 0 && tc.checkpoint_every > 0) save_checkpoint(ckpt_dir, cfg, params, opt, cursor);
  phase("before-first-step", cursor.step);

  for (int step = cursor.step; step < tc.steps; step++) {
    const double lr = learning_rate(tc, step);
    const GlobalStepResult fb =
        global_forward_backward(*model, arena, trace, batches.take(step), folded, comm, step, stop_signals.received());
    const double gnorm = apply_update(*model, opt, decay, tc, lr, step);
    cursor.step = step + 1;
    last_loss = fb.loss;
    tokens_done += double(B) * T;
    const bool last_step = cursor.step == tc.steps;

    if (writer) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      const double tok_s = tokens_done / std::max(elapsed, 1e-9);
      if (cursor.step % std::max(1, tc.log_every) == 0 || last_step || step == 0)
        log_metrics({{"step", cursor.step}, {"split", "train"}, {"loss", fb.loss}, {"lr", lr},
                     {"grad_norm", gnorm}, {"tokens_per_s", tok_s}, {"elapsed_s", elapsed}});
      if ((tc.eval_every > 0 && cursor.step % tc.eval_every == 0) || last_step) {
        if (last_step) phase("final-eval", cursor.step);
        last_eval = evaluate(*model, *task, eval_batches, cfg, arena);
        nlohmann::json rec = last_eval;
        rec["step"] = cursor.step;
        rec["split"] = "eval";
        rec["elapsed_s"] = elapsed;
        log_metrics(rec);
      }
      progress.update(cursor.step, fb.loss, tok_s, last_eval);
      if ((tc.checkpoint_every > 0 && cursor.step % tc.checkpoint_every == 0) || last_step || fb.stop_signal)
        save_checkpoint(ckpt_dir, cfg, params, opt, cursor);
    }
    phase("after-step", cursor.step);
    // A signal polled during the last step stops the run too (its checkpoint holds every step; a resume writes
    // the summary). One that arrives after the last poll is left to the caller: the run finishes.
    if (fb.stop_signal) {
      comm.barrier();  // the checkpoint is on disk before any rank reports the stop
      if (writer) progress.finish();
      throw StoppedBySignal{fb.stop_signal, cursor.step};
    }
  }
  if (!writer) {
    nlohmann::json shard;
    shard["rank"] = comm.rank();
    return shard;
  }
  progress.finish();
  // A run killed after its last checkpoint but before its summary resumes here with no step left to take.
  if (last_eval.is_null()) {
    phase("final-eval", cursor.step);
    last_eval = evaluate(*model, *task, eval_batches, cfg, arena);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  nlohmann::json summary;
  summary["steps"] = tc.steps;
  summary["parameters"] = params.total();
  summary["threads"] = thread_count();
  summary["device"] = model->backend().name();
  if (!bf16_gemm.empty()) summary["bf16_gemm"] = bf16_gemm;
  if (comm.size() > 1) {
    summary["ranks"] = comm.size();
    summary["communicator"] = comm.name();
  }
  summary["micro_batches"] = tc.micro_batches;
  summary["final_train_loss"] = last_loss;
  summary["eval"] = last_eval;
  summary["wall_seconds_this_session"] = elapsed;
  summary["tokens_per_second"] = tokens_done / std::max(elapsed, 1e-9);
  summary["checkpoint"] = latest_model_path(ckpt_dir);
  if (options.probe_at_end) {
    phase("probe", cursor.step);
    const ProbeResult probe = run_probe(*model, *task, cfg, last_eval);
    if (probe.ipmr) {
      summary["ipmr"] = probe.ipmr_json();
      std::cout << probe.ipmr_text();
    }
  }
  phase("summary", cursor.step);
  write_text_atomic(out + "/summary.json", summary.dump(2) + "\n");
  return summary;
}

}  // namespace canonlab
