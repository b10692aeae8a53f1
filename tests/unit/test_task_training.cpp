// Every task end to end through the trainer: a tiny model of each family trains a few steps on it, the evaluation
// reports the task's metrics (generative ones included), metrics.csv has their columns, and bad task configs
// are refused with the key path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "data/task.h"
#include "eval/evaluate.h"
#include "train/trainer.h"

using namespace canonlab;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> task_sets(const std::string& task) {
  if (task == "depo") return {"task.context=64", "task.depo.n_max=6", "task.depo.k_max=2", "task.depo.name_vocab=8"};
  if (task == "brevo") return {"task.context=96", "task.brevo.n_max=6", "task.eval_samples=3"};
  if (task == "mano") return {"task.context=48", "task.mano.max_ops=3", "task.mano.modulus=7"};
  if (task == "lano")
    return {"task.context=48", "task.lano.grammar=generate", "task.lano.depth=3", "task.eval_samples=3"};
  if (task == "capo") return {"task.context=160", "task.capo.people=50", "task.capo.eval_people=8"};
  if (task == "mqar") return {"task.context=32", "task.mqar.vocab=64", "task.mqar.pairs=4"};
  if (task == "text") return {"task.context=32"};
  return {"task.vocab=12", "task.n_symbols=5"};
}

RunConfig tiny(const std::string& task, const std::string& family) {
  std::vector<std::string> sets = {"task.name=" + task, "model.family=" + family, "model.d_model=16",
                                   "model.n_layers=2", "model.n_heads=2", "train.batch_size=2", "train.steps=3",
                                   "train.warmup_steps=1", "train.eval_every=0", "train.eval_batches=1",
                                   "train.checkpoint_every=0", "train.threads=1", "model.canon.set=AC"};
  if (family == "mamba2") sets.push_back("model.mamba2.mlp=true");
  for (const auto& s : task_sets(task)) sets.push_back(s);
  return config_from_yaml_string("{}", sets);
}

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("canonlab_task_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

}  // namespace

TEST(TaskTraining, EveryTaskTrainsAndReportsItsMetrics) {
  for (const std::string task : {"copy", "depo", "brevo", "mano", "lano", "capo", "mqar", "text"}) {
    if (task == "text" && !fs::exists("/usr/share/games/fortunes/fortunes")) continue;  // fortunes-min not installed
    SCOPED_TRACE(task);
    const RunConfig cfg = tiny(task, task == "lano" || task == "brevo" ? "gla" : "transformer");
    const std::string dir = temp_dir(task);
    TrainOptions o;
    o.out_dir = dir;
    o.progress = false;
    o.probe_at_end = false;
    const nlohmann::json summary = train(cfg, o);
    const auto names = make_task(cfg.task)->metric_names();
    ASSERT_FALSE(names.empty());
    for (const std::string& m : names) {
      ASSERT_TRUE(summary["eval"].contains(m)) << summary.dump();
      EXPECT_TRUE(std::isfinite(summary["eval"][m].get<double>())) << m;
    }
    EXPECT_TRUE(std::isfinite(summary["eval"]["loss"].get<double>()));
    std::ifstream csv(dir + "/metrics.csv");
    std::string header;
    std::getline(csv, header);
    EXPECT_NE(header.find("," + names.front() + ","), std::string::npos) << header;
    fs::remove_all(dir);
  }
}

TEST(TaskTraining, GenerativeEvaluationsRunOnEveryFamily) {
  for (const std::string family : {"transformer", "mamba2", "gdn"}) {
    for (const std::string task : {"brevo", "lano"}) {
      SCOPED_TRACE(task + " on " + family);
      const RunConfig cfg = tiny(task, family);
      const std::string dir = temp_dir(task + family);
      TrainOptions o;
      o.out_dir = dir;
      o.progress = false;
      o.probe_at_end = false;
      const nlohmann::json summary = train(cfg, o);
      const double acc = summary["eval"][task + "_acc"].get<double>();
      EXPECT_GE(acc, 0.0);
      EXPECT_LE(acc, 1.0);
      fs::remove_all(dir);
    }
  }
}

TEST(TaskTraining, BadTaskConfigsNameTheKey) {
  auto error_of = [](const std::vector<std::string>& sets) -> std::string {
    try {
      config_from_yaml_string("{}", sets);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({"task.name=depo", "task.context=50"}).find("task.context: 50"), std::string::npos);
  EXPECT_NE(error_of({"task.name=mano", "task.loss_on=copy"}).find("task.loss_on: 'copy'"), std::string::npos);
  EXPECT_NE(error_of({"task.name=lano", "task.loss_on=answers"}).find("task.loss_on: 'answers'"), std::string::npos);
  EXPECT_NE(error_of({"task.name=lano", "task.lano.grammar=/nonexistent.json"}).find("task.lano.grammar"),
            std::string::npos);
  EXPECT_NE(error_of({"task.name=text", "task.text.path=/nonexistent.txt"}).find("task.text.path"), std::string::npos);
  EXPECT_NE(error_of({"task.name=capo", "task.capo.fields=/nonexistent"}).find("task.capo.fields"), std::string::npos);
  EXPECT_NE(error_of({"task.name=mano", "task.mano.ops=[+, /]"}).find("task.mano.ops"), std::string::npos);
  EXPECT_NE(error_of({"task.name=copy", "task.context=9"}).find("task.context: 9"), std::string::npos);
  EXPECT_NE(error_of({"task.name=depo", "model.vocab_size=10"}).find("model.vocab_size: 10"), std::string::npos);
  // Resolution fills the paper's loss choice and the task's window.
  const RunConfig depo = config_from_yaml_string("{}", {"task.name=depo", "task.depo.n_max=20"});
  EXPECT_EQ(depo.task.loss_on, "answers");
  EXPECT_EQ(depo.task.context, 2048);
  EXPECT_EQ(depo.model.max_seq_len, 2048);
  const RunConfig mano = config_from_yaml_string("{}", {"task.name=mano"});
  EXPECT_EQ(mano.task.loss_on, "all");
}

TEST(TaskTraining, LargerModelVocabularyIsCutToTheTasksBeforeScoring) {
  // A model with extra (never targeted) vocabulary rows: the task must read its own columns at the right stride.
  TaskConfig tc;
  tc.name = "mano";
  tc.context = 48;
  tc.mano.max_ops = 3;
  auto task = make_task(tc);
  const Batch b = task->make_eval_batch(3, 1, kHeldOutStream, 0);
  const int V = task->vocab_size(), wide = V + 5, rows = b.B * b.T;
  std::vector<float> logits(size_t(rows) * wide, 0.f);
  for (int i = 0; i < rows; i++) {
    logits[size_t(i) * wide + size_t(b.targets[size_t(i)])] = 1.f;
    logits[size_t(i) * wide + size_t(V)] = 5.f;  // an extra row the task never predicts
  }
  std::vector<float> buffer;
  const float* cut = logits_over_task_vocab(logits.data(), rows, wide, V, buffer);
  MetricSums sums;
  task->score(b, cut, 0, sums);
  ASSERT_GT(sums["mano_acc"].count, 0);
  EXPECT_DOUBLE_EQ(sums["mano_acc"].sum / sums["mano_acc"].count, 1.0);
  EXPECT_EQ(logits_over_task_vocab(logits.data(), rows, V, V, buffer), logits.data()) << "no copy when they agree";
}
