// The one place that maps task.name to a generator.
#include "data/brevo.h"
#include "data/capo.h"
#include "data/copy_task.h"
#include "data/depo.h"
#include "data/lano.h"
#include "data/mano.h"
#include "data/mqar.h"
#include "data/text.h"
#include "engine/error.h"

namespace canonlab {

namespace {

void check_context(const TaskConfig& cfg) {
  if (cfg.name != "copy" && cfg.name != "mqar" && cfg.context < 0)
    throw Error("task.context: " + std::to_string(cfg.context) + " is negative; allowed: 0 (the task's default) or more");
}

}  // namespace

std::unique_ptr<Task> make_task(const TaskConfig& cfg) {
  check_context(cfg);
  if (cfg.name == "copy") {
    CANONLAB_CHECK(cfg.context == 0 || cfg.context == 2 * cfg.n_symbols + 1,
                   "task.context: " + std::to_string(cfg.context) + " does not apply to the copy task (its length is 2 * "
                   "task.n_symbols + 1 = " + std::to_string(2 * cfg.n_symbols + 1) + "); allowed: 0");
    return std::make_unique<CopyTask>(cfg);
  }
  if (cfg.name == "depo") return std::make_unique<DepoTask>(cfg);
  if (cfg.name == "brevo") return std::make_unique<BrevoTask>(cfg);
  if (cfg.name == "mano") return std::make_unique<ManoTask>(cfg);
  if (cfg.name == "lano") return std::make_unique<LanoTask>(cfg);
  if (cfg.name == "capo") return std::make_unique<CapoTask>(cfg);
  if (cfg.name == "mqar") return std::make_unique<MqarTask>(cfg);
  if (cfg.name == "text") return std::make_unique<TextTask>(cfg);
  throw Error("task.name: '" + cfg.name + "' is not available; allowed: copy, depo, brevo, mano, lano, capo, mqar, text");
}

bool paper_trains_on_answers_only(const std::string& task_name) {
  return task_name == "depo" || task_name == "brevo" || task_name == "mqar";
}

TaskShape task_shape(const TaskConfig& cfg) {
  check_context(cfg);
  if (cfg.name == "lano") return lano_task_shape(cfg);  // a generated grammar is vetted, not built
  auto task = make_task(cfg);
  return {task->vocab_size(), task->seq_len()};
}

}  // namespace canonlab
