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
#include "train/tensorboard_log.h"
#include "io/json_read.h"

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
    if (keep_up_to_step > 0) kept_ = read_records(jsonl_path_, keep_up_to_step);
    std::string jsonl_text, csv_text = csv_header();
    for (const nlohmann::json& j : kept_) {
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
  // The records a resume kept (those of the checkpoint's steps), in order; empty for a fresh run.
  const std::vector<nlohmann::json>& kept() const { return kept_; }
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
      const nlohmann::json j = parse_json_or_discarded(record);
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
  std::vector<nlohmann::json> kept_;
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

// Everything a run holds between its steps, in the order train() used to create it.
struct TrainingRun::State {
  State(const RunConfig& config, const TrainOptions& opts, const StopSignals& signals)
      : cfg(config), options(opts), stop_signals(signals), comm(opts.comm ? *opts.comm : single) {}

  void phase(std::string_view name, int steps_done) const {
    if (options.at_phase) options.at_phase(name, steps_done);
  }
  void log_metrics(const nlohmann::json& record) {
    metrics->write(record);
    if (tensorboard) tensorboard->write(record);
    if (options.on_metrics) options.on_metrics(record);
  }

  const RunConfig cfg;
  const TrainOptions options;
  const StopSignals& stop_signals;
  SingleProcess single;
  Communicator& comm;
  bool writer = false;  // the one rank that writes the run directory
  std::string out, ckpt_dir;
  BatchSplit split;
  // Held until the run ends: a second train (or --resume) on this directory would interleave two runs' records.
  std::optional<DirectoryLock> lock;
  std::unique_ptr<Task> task;
  std::unique_ptr<LanguageModel<float>> model;
  AdamWState opt;
  TrainingCursor cursor;
  std::string bf16_gemm;
  std::optional<MetricsLog> metrics;
  std::optional<TensorBoardLog> tensorboard;  // log.tensorboard: RUN_DIR/tb/
  DeviceBuffer<uint8_t> decay;
  std::vector<EvalBatch> eval_batches;
  int B = 0, T = 0;
  std::optional<Arena> arena;
  ActivationTrace<float> trace;
  std::optional<Progress> progress;
  std::chrono::steady_clock::time_point t_start;
  double last_loss = NAN, tokens_done = 0;
  nlohmann::json last_eval;
  std::optional<BatchPrefetcher> batches;
  std::optional<TrainStep> train_step;
  // The steps enqueued since the host last read the step scalars (a GPU reads them at logged steps only): their
  // inputs, for the non-finite guard's report should one of them have gone wrong.
  struct Unread {
    int step;
    std::vector<Batch> micro_batches;
    double weight;
  };
  std::vector<Unread> unread;
  size_t kernel_choices_noted = 0;  // backend().kernel_choices() already printed

  // The backend's kernel choices made since the last note, each printed once (a GPU's attention per case).
  void note_kernel_choices() {
    const std::vector<std::string> choices = model->backend().kernel_choices();
    for (; kernel_choices_noted < choices.size(); kernel_choices_noted++)
      progress->note(model->backend().name() + ": " + choices[kernel_choices_noted]);
  }
};

TrainingRun::TrainingRun(const RunConfig& cfg, const TrainOptions& options, const StopSignals& stop_signals)
    : state_(std::make_unique<State>(cfg, options, stop_signals)) {
  State& s = *state_;
  s.phase("start", 0);
  const TrainConfig& tc = s.cfg.train;
  s.writer = s.comm.rank() == 0;
  check_device_available(tc.device);  // before the run directory exists
  set_thread_count(tc.threads);
  s.out = options.out_dir;
  s.ckpt_dir = s.out + "/checkpoints";
  s.split = split_batch(tc, s.comm.size(), s.comm.rank());
  if (s.writer) {
    create_directory(s.out, "run directory (--out)");
    s.lock.emplace(s.out, ".train.lock", "canonlab train");
    // What writers killed mid-write left (a temp file per kill); nobody else writes here while we hold the lock,
    // except a sweep writing status files, whose live writer keeps them.
    remove_stale_temp_files(s.out);
    remove_stale_temp_files(s.ckpt_dir);
    claim_run_directory(s.out, options.resume, options.force);  // an earlier run is refused, or moved aside (--force)
    create_directory(s.ckpt_dir, "checkpoint directory");
  }
  s.comm.barrier();  // the other ranks read checkpoints only once rank 0 has checked and cleaned the directory

  s.task = make_task(s.cfg.task);
  s.model = build_model(s.cfg);
  ParameterStore<float>& params = s.model->params();
  if (options.resume) {
    s.cursor = load_latest_checkpoint(s.ckpt_dir, s.cfg, params, s.opt);
    if (s.writer) std::fprintf(stderr, "resuming from step %d of %s\n", s.cursor.step, s.ckpt_dir.c_str());
  }
  check_ranks_agree(s.comm, s.cfg, params, s.cursor.step);
  // Said once, where the user sees it: whether bf16 pays on this CPU (the emulated path is no faster than fp32).
  if (tc.precision == "bf16" && tc.device == "cpu") s.bf16_gemm = bf16_path_description();
  if (s.writer && !s.bf16_gemm.empty()) std::fprintf(stderr, "train.precision=bf16: %s\n", s.bf16_gemm.c_str());
  if (s.writer) {
    write_text_atomic(s.out + "/config.resolved.yaml", config_to_yaml(s.cfg));
    s.metrics.emplace(s.out, s.cursor.step, s.task->metric_names());
    if (s.cfg.log.tensorboard) {
      remove_stale_temp_files(s.out + "/tb");
      s.tensorboard.emplace(s.out, s.metrics->kept(), config_to_yaml(s.cfg));
    }
  }

  s.decay = device_decay_mask(params, tc.decay_on);
  if (s.writer) s.eval_batches = make_eval_batches(*s.task, s.cfg);
  s.B = tc.batch_size;
  s.T = s.task->seq_len();
  s.arena.emplace(s.model->backend().memory());
  s.progress.emplace(tc.steps, options.progress && s.writer, isatty(STDERR_FILENO), s.task->metric_names().front());

  s.t_start = std::chrono::steady_clock::now();
  s.last_loss = s.writer ? s.metrics->last_train_loss() : NAN;
  // This rank's share of every step: split.micro_batches batches of split.rows sequences (train/step.h), the next
  // step's drawn while this one trains.
  s.batches.emplace(*s.task, tc.data_seed, s.split, s.T, s.cursor.step, tc.steps, options.prefetch_batches);
  s.train_step.emplace(*s.model, *s.arena, s.trace, s.opt, s.decay, tc, s.comm, s.split, s.T);
  if (s.writer && s.cursor.step == 0 && tc.checkpoint_every > 0)
    save_checkpoint(s.ckpt_dir, s.cfg, params, s.opt, s.cursor);
  s.phase("before-first-step", s.cursor.step);
}

TrainingRun::~TrainingRun() = default;

int TrainingRun::steps_done() const { return state_->cursor.step; }
bool TrainingRun::all_steps_done() const { return state_->cursor.step >= state_->cfg.train.steps; }

void TrainingRun::step() {
  State& s = *state_;
  const TrainConfig& tc = s.cfg.train;
  ParameterStore<float>& params = s.model->params();
  const int step = s.cursor.step;
  const double lr = learning_rate(tc, step);
  const int local_stop_signal = s.stop_signals.received();
  const std::span<const Batch> micro = s.batches->take(step);
  double local_weight = 0;
  for (const Batch& b : micro) local_weight += loss_mask_weight(b);
  const double weight = fold_in_order(s.comm.all_gather(std::span<const double>(&local_weight, 1)));
  s.train_step->enqueue(micro, weight, step, lr);
  s.tokens_done += double(s.B) * s.T;
  const int done = step + 1;
  const bool last_step = done == tc.steps;
  const bool logged = done % std::max(1, tc.log_every) == 0 || last_step || step == 0;
  const bool evaluating = (tc.eval_every > 0 && done % tc.eval_every == 0) || last_step;
  const bool checkpointing = (tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0) || last_step;
  // The step's scalars are read where they cost nothing (host memory), where ranks must agree on them, and where the
  // run logs, evaluates, checkpoints or stops; in between, a GPU's steps follow one another without the host waiting.
  const bool observe = s.model->backend().memory().host_accessible() || s.comm.size() > 1 || logged || evaluating ||
                       checkpointing || local_stop_signal != 0;
  if (!observe) {
    s.unread.push_back({step, std::vector<Batch>(micro.begin(), micro.end()), weight});
    s.cursor.step = done;
    s.phase("after-step", s.cursor.step);
    if (s.writer) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t_start).count();
      s.progress->update(s.cursor.step, s.last_loss, s.tokens_done / std::max(elapsed, 1e-9), s.last_eval);
    }
    return;
  }
  const TrainStep::Scalars scalars = s.train_step->read();
  if (scalars.halted_at >= 0) {
    if (scalars.halted_at == step) s.train_step->report_halt(scalars, micro, weight, /*latest=*/true);
    for (const State::Unread& u : s.unread)
      if (u.step == scalars.halted_at) s.train_step->report_halt(scalars, u.micro_batches, u.weight, false);
    throw Error("training stopped at step " + std::to_string(scalars.halted_at) + ": loss or gradient not finite");
  }
  s.unread.clear();
  s.cursor.step = done;
  // The loss and the stop signals of every rank (rank order), as the global batch's.
  const double mine[2] = {scalars.loss(), double(local_stop_signal)};
  const std::vector<double> all = s.comm.all_gather(std::span<const double>(mine, 2));
  struct {
    double loss = 0;
    int stop_signal = 0;
  } fb;
  fb.loss = all[0];
  for (int r = 0; r < s.comm.size(); r++) {
    if (r > 0) fb.loss += all[size_t(2 * r)];
    if (fb.stop_signal == 0) fb.stop_signal = int(all[size_t(2 * r + 1)]);
  }
  const double gnorm = std::sqrt(scalars.sumsq);
  s.last_loss = fb.loss;

  if (s.writer) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t_start).count();
    const double tok_s = s.tokens_done / std::max(elapsed, 1e-9);
    if (logged)
      s.log_metrics({{"step", s.cursor.step}, {"split", "train"}, {"loss", fb.loss}, {"lr", lr},
                     {"grad_norm", gnorm}, {"tokens_per_s", tok_s}, {"elapsed_s", elapsed}});
    if (evaluating) {
      if (last_step) s.phase("final-eval", s.cursor.step);
      s.last_eval = evaluate(*s.model, *s.task, s.eval_batches, s.cfg, *s.arena);
      nlohmann::json rec = s.last_eval;
      rec["step"] = s.cursor.step;
      rec["split"] = "eval";
      rec["elapsed_s"] = elapsed;
      s.log_metrics(rec);
    }
    s.note_kernel_choices();
    s.progress->update(s.cursor.step, fb.loss, tok_s, s.last_eval);
    if (checkpointing || fb.stop_signal) save_checkpoint(s.ckpt_dir, s.cfg, params, s.opt, s.cursor);
  }
  s.phase("after-step", s.cursor.step);
  // A signal polled during the last step stops the run too (its checkpoint holds every step; a resume writes
  // the summary). One that arrives after the last poll is left to the caller: the run finishes.
  if (fb.stop_signal) {
    s.comm.barrier();  // the checkpoint is on disk before any rank reports the stop
    if (s.writer) s.progress->finish();
    throw StoppedBySignal{fb.stop_signal, s.cursor.step};
  }
}

nlohmann::json TrainingRun::finish() {
  State& s = *state_;
  const TrainConfig& tc = s.cfg.train;
  if (!s.writer) {
    nlohmann::json shard;
    shard["rank"] = s.comm.rank();
    return shard;
  }
  s.progress->finish();
  // A run killed after its last checkpoint but before its summary resumes here with no step left to take.
  if (s.last_eval.is_null()) {
    s.phase("final-eval", s.cursor.step);
    s.last_eval = evaluate(*s.model, *s.task, s.eval_batches, s.cfg, *s.arena);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t_start).count();

  nlohmann::json summary;
  summary["steps"] = tc.steps;
  summary["parameters"] = s.model->params().total();
  summary["threads"] = thread_count();
  summary["device"] = s.model->backend().name();
  // On a GPU: how many steps ran as a replay of the captured step graph (train.cuda_graph; 0 = every step eager).
  if (s.model->backend().memory().device() == Device::cuda)
    summary["cuda_graph_replays"] = s.model->backend().replayed_steps();
  if (!s.bf16_gemm.empty()) summary["bf16_gemm"] = s.bf16_gemm;
  // The kernels the backend chose per case (on a GPU with bf16: cuDNN's attention or the flash kernel, and why)
  if (const std::vector<std::string> choices = s.model->backend().kernel_choices(); !choices.empty())
    summary["kernel_choices"] = choices;
  if (s.comm.size() > 1) {
    summary["ranks"] = s.comm.size();
    summary["communicator"] = s.comm.name();
  }
  summary["micro_batches"] = tc.micro_batches;
  summary["final_train_loss"] = s.last_loss;
  summary["eval"] = s.last_eval;
  summary["wall_seconds_this_session"] = elapsed;
  summary["tokens_per_second"] = s.tokens_done / std::max(elapsed, 1e-9);
  summary["checkpoint"] = latest_model_path(s.ckpt_dir);
  if (s.options.probe_at_end) {
    s.phase("probe", s.cursor.step);
    const ProbeResult probe = run_probe(*s.model, *s.task, s.cfg, s.last_eval);
    if (probe.ipmr) {
      summary["ipmr"] = probe.ipmr_json();
      std::cout << probe.ipmr_text();
      if (s.tensorboard) s.tensorboard->write_ipmr(s.cursor.step, *probe.ipmr, probe.ipmr_text());
    }
  }
  s.phase("summary", s.cursor.step);
  write_text_atomic(s.out + "/summary.json", summary.dump(2) + "\n");
  return summary;
}

nlohmann::json train(const RunConfig& cfg, const TrainOptions& options) {
  // Caught from the first line to the last: a signal at any moment either stops the run with a checkpoint or lets
  // it finish, never kills it half-written.
  std::optional<StopSignals> own_stop_signals;
  if (options.stop_signals == nullptr) own_stop_signals.emplace();
  TrainingRun run(cfg, options, options.stop_signals ? *options.stop_signals : *own_stop_signals);
  while (!run.all_steps_done()) run.step();
  return run.finish();
}

}  // namespace canonlab
