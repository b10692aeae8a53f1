#pragma once
// One subcommand per file (cmd_<name>.cpp). Each add_*_command registers its options on `app` and returns the
// action that runs it; the options live in state owned by the returned closure.
#include <CLI/CLI.hpp>

#include <functional>

namespace canonlab::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_probe_command(CLI::App& app);
Command add_debug_dump_command(CLI::App& app);
Command add_bench_step_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_sweep_task_command(CLI::App& app);  // internal: one Slurm array task (cmd_sweep.cpp)
Command add_train_pack_command(CLI::App& app);  // internal: one pack of `sweep --pack` (cmd_train_pack.cpp)
Command add_data_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_export_command(CLI::App& app);     // --to hf (cmd_export.cpp)
Command add_import_hf_command(CLI::App& app);

}  // namespace canonlab::cli
