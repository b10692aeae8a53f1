#include "sweep/slurm_launcher.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string_view>

#include "config/config.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/directory_lock.h"
#include "io/strict_number.h"
#include "sweep/child_process.h"
#include "sweep/manifest.h"
#include "sweep/pack_attempt.h"
#include "sweep/run_attempt.h"
#include "sweep/runner.h"
#include "sweep/slurm_queue.h"
#include "sweep/slurm_script.h"
#include "io/json_read.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Subjects of the errors about the sweep directory: every path below it comes from --out and the run names.
const std::string kCannotRead = "sweep directory (--out): cannot read";
const std::string kCannotCreate = "sweep directory (--out): cannot create";

// One more than the highest N of SWEEP_DIR/slurm/submit-N.* (a script whose sbatch failed keeps its number).
int next_submission_number(const std::string& dir) {
  int highest = 0;
  for (const fs::path& path : directory_listing(fs::path(dir) / "slurm", kCannotRead)) {
    const std::string stem = path.stem().string();
    if (stem.starts_with("submit-"))
      if (auto n = parse_integer<int>(stem.substr(7))) highest = std::max(highest, *n);
  }
  return highest + 1;
}

bool grid_differs(const std::string& dir, const SweepSpec& spec, const std::vector<SweepRun>& runs) {
  const std::optional<std::string> text = read_text_if_exists(fs::path(dir) / "sweep.json", "sweep manifest");
  if (!text) return false;
  const auto before = parse_json_or_discarded(*text);
  return before.is_discarded() || sweep_difference(before, make_sweep_manifest(spec, runs)).has_value();
}

std::string job_list(const std::vector<SlurmSubmission>& submissions) {
  std::string list;
  for (const auto& s : submissions) list += (list.empty() ? "" : ", ") + s.job_id;
  return list;
}

// The runs this submission trains, in grid order: neither finished nor held by an earlier submission's task.
struct Selection {
  std::vector<const SweepRun*> todo;
  int finished = 0, queued = 0;
};

Selection select_runs(const std::string& dir, const std::vector<SweepRun>& runs,
                      const std::map<std::string, QueuedRun>& active, bool mark_finished) {
  Selection s;
  for (const SweepRun& run : runs) {
    const std::string run_dir = (fs::path(dir) / "runs" / run.name).string();
    if (inspect_run_dir(run_dir, run.config.train.steps) == RunDiskState::finished) {
      if (mark_finished) mark_done_if_unmarked(run_dir);
      s.finished++;
    } else if (active.count(run.name)) {
      s.queued++;
    } else {
      s.todo.push_back(&run);
    }
  }
  return s;
}

// The array tasks: runs_per_task runs in grid order each, or with --pack the packs of compatible runs.
std::vector<std::vector<SlurmTaskRun>> group_into_tasks(const std::vector<const SweepRun*>& todo,
                                                        const SlurmSubmitOptions& options) {
  std::vector<std::vector<SlurmTaskRun>> tasks;
  if (options.pack > 0) {
    for (const std::vector<size_t>& pack : group_into_packs(todo, options.pack)) {
      tasks.emplace_back();
      for (const size_t i : pack) tasks.back().push_back({todo[i]->name, todo[i]->config.train.steps});
    }
    return tasks;
  }
  for (size_t i = 0; i < todo.size(); i++) {
    if (i % size_t(options.settings.runs_per_task) == 0) tasks.emplace_back();
    tasks.back().push_back({todo[i]->name, todo[i]->config.train.steps});
  }
  return tasks;
}

SlurmSubmission new_submission(const std::string& dir, const std::vector<const SweepRun*>& todo,
                               const SlurmSubmitOptions& options) {
  return {next_submission_number(dir), dir, "", options.pack > 0 ? options.pack : options.settings.runs_per_task,
          group_into_tasks(todo, options), options.pack > 0};
}

SlurmScriptInputs script_inputs(const SweepSpec& spec, const SlurmSubmitOptions& options, const SlurmSubmission& s,
                                int runs) {
  SlurmScriptInputs in;
  in.sweep_name = spec.name;
  in.executable = options.executable;
  in.submission_file = submission_path(options.out_dir, s.number);
  in.log_dir = (fs::path(options.out_dir) / "slurm" / "logs").string();
  in.tasks = int(s.tasks.size());
  in.runs = runs;
  // A pack's runs step side by side at one thread each (train/pack.h); its task gets a CPU per run.
  size_t widest = 1;
  for (const auto& task : s.tasks) widest = std::max(widest, task.size());
  in.cpus_per_task = s.pack && options.threads_per_run == 1 ? int(widest) : options.threads_per_run;
  in.settings = options.settings;
  in.settings.runs_per_task = s.runs_per_task;
  return in;
}

// A path as it can be pasted into a shell: quoted only when it needs to be.
std::string shell_word(const std::string& path) {
  const bool plain = std::ranges::all_of(path, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("/._-+=,:@").find(c) != std::string_view::npos;
  });
  return plain ? path : shell_quote(path);
}

std::string trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

}  // namespace

std::string running_executable() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  CANONLAB_CHECK(!error, "cannot find the running canonlab binary (readlink /proc/self/exe): " + error.message());
  CANONLAB_CHECK(!exe.string().ends_with(" (deleted)"),
                 "the running canonlab binary '" + exe.string() + "' was replaced on disk since it started; run the "
                 "new one, so that the array tasks train with the same code");
  return exe.string();
}

int submit_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SlurmSubmitOptions& options,
                 std::ostream& out) {
  const std::string& dir = options.out_dir;
  CANONLAB_CHECK(fs::path(dir).is_absolute(), "the Slurm launcher needs an absolute sweep directory, got '" + dir + "'");
  CANONLAB_CHECK(options.settings.runs_per_task >= 1, "--runs-per-task must be at least 1");

  // What earlier submissions of this directory still hold in the queue.
  const std::vector<SlurmSubmission> earlier =
      is_directory_at(dir, kCannotRead) ? read_submissions(dir) : std::vector<SlurmSubmission>{};
  std::string why_not;
  std::optional<SlurmQueue> queue = earlier.empty() ? std::optional<SlurmQueue>(SlurmQueue{}) : query_slurm_queue(why_not);
  if (!queue && !options.dry_run)
    throw Error("cannot tell which runs of this directory's earlier submissions (job " + job_list(earlier) +
                ") are still pending or running, so a new one could train a run twice: " + why_not +
                ". Submit from a machine where squeue answers (a login node of the cluster)");
  const std::map<std::string, QueuedRun> active = queue ? queued_runs(earlier, *queue) : std::map<std::string, QueuedRun>{};
  if (options.force && !active.empty() && grid_differs(dir, spec, runs))
    throw Error("--force would move changed runs out of '" + dir + "', but " + std::to_string(active.size()) +
                " run(s) of it are pending or running in Slurm (e.g. '" + active.begin()->first + "' in job " +
                active.begin()->second.task_id + "); wait for them or scancel job " + job_list(earlier) + " first");

  if (options.dry_run) {
    const Selection selection = select_runs(dir, runs, active, /*mark_finished=*/false);
    if (selection.todo.empty()) {
      out << "nothing to submit: " << selection.finished << " run(s) finished, " << selection.queued
          << " pending or running in Slurm\n";
      return 0;
    }
    const SlurmSubmission s = new_submission(dir, selection.todo, options);
    out << make_sbatch_script(script_inputs(spec, options, s, int(selection.todo.size())));
    std::cerr << "dry run: would submit " << selection.todo.size() << " run(s) in " << s.tasks.size()
              << " array task(s) as " << submission_script_path(dir, s.number) << " (" << selection.finished
              << " finished, " << selection.queued << " pending or running in Slurm"
              << (queue ? "" : "; squeue unknown: " + why_not) << "); nothing written, nothing submitted\n";
    return 0;
  }

  create_directories_at(fs::path(dir) / "runs", kCannotCreate);
  DirectoryLock lock(dir, ".sweep.lock", "canonlab sweep");
  prepare_sweep_directory(dir, spec, runs, options.force);
  const Selection selection = select_runs(dir, runs, active, /*mark_finished=*/true);
  if (selection.todo.empty()) {
    out << "nothing to submit: " << selection.finished << " run(s) finished, " << selection.queued
        << " pending or running in Slurm" << (earlier.empty() ? "" : " (job " + job_list(earlier) + ")") << "\n";
    if (selection.queued == 0) out << "next: canonlab report " << shell_word(dir) << "\n";
    return 0;
  }
  for (const SweepRun* run : selection.todo) {
    const fs::path run_dir = fs::path(dir) / "runs" / run->name;
    create_directories_at(run_dir, kCannotCreate);
    const std::string yaml = config_to_yaml(run->config);
    if (read_text_if_exists(run_dir / "run.yaml", "run config") != yaml) write_text_atomic((run_dir / "run.yaml").string(), yaml);
  }
  SlurmSubmission submission = new_submission(dir, selection.todo, options);
  const std::string script_path = submission_script_path(dir, submission.number);
  const std::string record_path = submission_path(dir, submission.number);
  create_directories_at(fs::path(dir) / "slurm" / "logs", kCannotCreate);
  write_text_atomic(script_path, make_sbatch_script(script_inputs(spec, options, submission, int(selection.todo.size()))));
  write_submission(record_path, submission);

  const CommandResult r = run_command({"sbatch", "--parsable", script_path});
  const std::string answer = trimmed(r.output.substr(0, r.output.find(';')));  // "123" or "123;cluster"
  if (!r.started || !r.exit.ok() || answer.empty() || answer.find_first_not_of("0123456789") != std::string::npos) {
    std::error_code ignored;  // the sbatch failure is the error to report; a record without a job id is skipped
    fs::remove(record_path, ignored);
    const std::string why = !r.started ? "sbatch cannot be run (" + r.errors + "); is this a Slurm login node?"
                                       : "sbatch answered " + r.exit.describe() + ": " + trimmed(r.errors + r.output);
    throw Error("the submission of '" + script_path + "' failed: " + why);
  }
  submission.job_id = answer;
  write_submission(record_path, submission);

  const size_t tasks = submission.tasks.size();
  out << "submitted job " << answer << ": " << selection.todo.size() << " run(s) in " << tasks << " array task(s) ("
      << submission.runs_per_task << " run(s) per task" << (submission.pack ? ", each task one pack" : "")
      << "), script " << script_path << "\n"
      << "  left out: " << selection.finished << " finished, " << selection.queued << " pending or running in Slurm\n"
      << "watch:    canonlab sweep --status " << shell_word(dir) << "   (or: squeue --jobs " << answer << ")\n"
      << "logs:     " << dir << "/slurm/logs/" << answer << "_<task>.out; each run's training output in " << dir
      << "/runs/<run>/train.log\n"
      << "resubmit: the same command submits what is left (failed, stopped, timed out), not what is still queued\n"
      << "results:  canonlab report " << shell_word(dir) << "\n";
  return 0;
}

}  // namespace canonlab
