// canonlab data show TASK|CONFIG [--set k=v]... [--n N] [--eval SUITE] [--seed S] [--tokens N] [--width W]
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "data/show.h"
#include "engine/error.h"

namespace canonlab::cli {

namespace {

struct DataShowArgs {
  std::string task_or_config, suite;
  std::vector<std::string> sets;
  int n = 2, tokens = 400, width = 110;
  uint64_t seed = 1;
};

int run_data_show(const DataShowArgs& a) {
  const RunConfig cfg = std::filesystem::is_regular_file(a.task_or_config)
                            ? load_config(a.task_or_config, a.sets)
                            : config_from_yaml_string("task:\n  name: " + a.task_or_config + "\n", a.sets);
  auto task = make_task(cfg.task);
  const std::vector<std::string> suites = task->eval_suites();
  int suite = -1;
  if (!a.suite.empty()) {
    for (int s = 0; s < int(suites.size()); s++)
      if (suites[size_t(s)] == a.suite || (suites[size_t(s)].empty() && a.suite == "default")) suite = s;
    if (suite < 0) {
      std::string allowed;
      for (const auto& s : suites) allowed += (allowed.empty() ? "" : ", ") + (s.empty() ? std::string("default") : s);
      throw Error("--eval: '" + a.suite + "' is not an evaluation suite of " + task->name() + "; allowed: " + allowed);
    }
  }
  Batch batch;
  batch.resize(a.n, task->seq_len());
  for (int r = 0; r < a.n; r++) {
    if (suite >= 0) task->sample_eval(batch, r, a.seed, kHeldOutStream, uint64_t(r), suite);
    else task->sample(batch, r, a.seed, 0, uint64_t(r));
  }
  std::cout << task->name() << ": vocabulary " << task->vocab_size() << ", window " << task->seq_len() << " tokens, "
            << (suite >= 0 ? "evaluation suite '" + a.suite + "'" : std::string("training stream"))
            << "; [x] = trained on, {x} = trained and scored (" << task->metric_names().front() << ")\n";
  for (int r = 0; r < a.n; r++) {
    std::cout << "\n--- example " << r << "\n" << show_window(*task, batch, r, a.width, a.tokens);
  }
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& app) {
  auto a = std::make_shared<DataShowArgs>();
  CLI::App* sub = app.add_subcommand("data", "Look at the data a task generates");
  sub->require_subcommand(1);
  CLI::App* show = sub->add_subcommand("show", "Print decoded windows of a task with the loss mask marked");
  show->add_option("task", a->task_or_config, "Task name (copy, depo, brevo, mano, lano, capo, mqar, text) or a YAML config")
      ->required();
  show->add_option("--set", a->sets, "Override a config key: --set task.depo.n_max=20 (repeatable)");
  show->add_option("--n", a->n, "Windows to print")->check(CLI::Range(1, 1000));
  show->add_option("--eval", a->suite, "Show an evaluation suite (e.g. depo: k_max, k_half) instead of training data");
  show->add_option("--seed", a->seed, "Data seed");
  show->add_option("--tokens", a->tokens, "Tokens per window to print; 0 = all")->check(CLI::NonNegativeNumber);
  show->add_option("--width", a->width, "Line width")->check(CLI::Range(20, 10000));
  return {sub, [a] { return run_data_show(*a); }};
}

}  // namespace canonlab::cli
