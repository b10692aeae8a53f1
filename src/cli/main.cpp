// canonlab command line. Each subcommand lives in its own cmd_<name>.cpp; user errors exit with status 2.
#include <filesystem>
#include <iostream>
#include <new>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <vector>

#include "cli/commands.h"
#include "engine/error.h"

using namespace canonlab;

namespace {

// "cannot create directories 'runs/x': Read-only file system" from libstdc++'s
// "filesystem error: cannot create directories: Read-only file system [runs/x]".
std::string describe_filesystem_error(const std::filesystem::filesystem_error& e) {
  std::string what = e.what();
  const std::string prefix = "filesystem error: ";
  if (what.starts_with(prefix)) what = what.substr(prefix.size());
  const std::string operation = what.substr(0, what.find(':'));
  std::string text = operation + " '" + e.path1().string() + "'";
  if (!e.path2().empty()) text += " and '" + e.path2().string() + "'";
  return text + ": " + e.code().message();
}

// Buffers of 1 MiB and more (arena blocks, the parameter store, batches, checkpoint reads) get mappings of their
// own and go back to the system when freed. glibc's default raises this threshold after the first large free and
// from then on serves arena blocks from the heap, which keeps them when they are freed: the IPMR probe after
// training then held the blocks of its first batch twice, once freed in the heap and once merged (E1-Bk0 at
// T = 255: 666 MiB peak instead of 554; docs/resources.md). With a fixed threshold the peak is the resource
// estimate's sum of live buffers; the training loop allocates nothing this large after its first step.
// Smaller buffers stay in the heap, and its free top is kept up to 32 MiB instead of glibc's 128 KiB: oneDNN's sgemm
// allocates and frees a scratch buffer of about 0.5 MiB per call, and with the default every free gave those pages
// back (brk) and the next call faulted them in again, some 16 times and 4% of an E1-Bk0 step.
void return_large_buffers_to_the_system() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  return_large_buffers_to_the_system();
  CLI::App app{"canonlab: train small language models on synthetic tasks and probe what they learned"};
  app.require_subcommand(1);
  const std::vector<cli::Command> commands = {
      cli::add_train_command(app),
      cli::add_eval_command(app),
      cli::add_probe_command(app),
      cli::add_debug_dump_command(app),
      cli::add_bench_step_command(app),
      cli::add_sweep_command(app),
      cli::add_sweep_task_command(app),
      cli::add_train_pack_command(app),
      cli::add_report_command(app),
      cli::add_data_command(app),
      cli::add_generate_command(app),
      cli::add_export_command(app),
      cli::add_import_hf_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" of exit code 0; a bad option or value prints CLI11's message naming it and
    // exits 2, the status of every other bad input (CLI11's own codes, 105 to 109, would say nothing more).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const cli::Command& c : commands)
      if (*c.app) return c.run();
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // Most file system failures are caught where they happen and named there; this is the fallback for the rest.
    std::cerr << "error: " << describe_filesystem_error(e) << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory; `canonlab train CONFIG --dry-run` estimates what a config needs\n";
    return 1;
  } catch (const std::exception& e) {  // other library failures: say what, do not abort
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
