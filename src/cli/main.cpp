// canonlab command line. Each subcommand lives in its own cmd_<name>.cpp; user errors exit with status 2.
#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "engine/error.h"

using namespace canonlab;

int main(int argc, char** argv) {
  CLI::App app{"canonlab: train small language models on synthetic tasks and probe what they learned"};
  app.require_subcommand(1);
  const std::vector<cli::Command> commands = {
      cli::add_train_command(app),
      cli::add_eval_command(app),
      cli::add_probe_command(app),
      cli::add_debug_dump_command(app),
      cli::add_bench_step_command(app),
      cli::add_sweep_command(app),
      cli::add_report_command(app),
      cli::add_data_command(app),
  };
  CLI11_PARSE(app, argc, argv);
  try {
    for (const cli::Command& c : commands)
      if (*c.app) return c.run();
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {  // file system and other library failures: say what, do not abort
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
