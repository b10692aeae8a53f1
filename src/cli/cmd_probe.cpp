// canonlab probe RUN_DIR|CHECKPOINT [--set task.k=v]... [--heads L0H1,L3H3] [--examples N] [--out DIR] [--json]
// The induction probes of a checkpoint (eval loss and copy_acc, per-head IPMR at delta = 1 and the key-shift
// offset, top heads, mean and global IPMR) plus attention maps of chosen heads on held-out sequences, written
// as probe.json, SVG pictures and a self-contained index.html.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/model_shapes.h"
#include "data/copy_task.h"
#include "engine/error.h"
#include "eval/attention_maps.h"
#include "eval/probe.h"
#include "eval/probe_pictures.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "train/tensorboard_log.h"

namespace fs = std::filesystem;

namespace canonlab::cli {

namespace {

constexpr int kDefaultTopHeads = 4;  // default attention maps: this many best heads at delta = 1
constexpr int kMaxExamples = 64;     // each example is one picture per head; more is unreadable anyway

struct ProbeArgs {
  std::string checkpoint, heads, out;
  std::vector<std::string> sets;
  int examples = 2;
  bool json_out = false;
};

// Next to the run's checkpoints/: RUN_DIR/probe for a run directory, <checkpoint dir>/../probe for a file.
fs::path default_out_dir(const std::string& checkpoint_path) {
  return absolute_path(checkpoint_path, "checkpoint").parent_path().parent_path() / "probe";
}

// Pictures of an earlier probe with other heads or more examples would otherwise linger beside the new ones
// and contradict probe.json. Only files with our own names are removed.
void remove_old_pictures(const fs::path& dir) {
  for (const fs::path& path : directory_listing(dir, "--out: cannot read the probe directory")) {
    const std::string name = path.filename().string();
    if (name.ends_with(".svg") && (name.starts_with("attention_ex") || name.starts_with("ipmr_delta_")) &&
        path_status(path).is_regular_file())
      remove_at(path, "--out: cannot remove the earlier probe's picture");
  }
}

std::vector<HeadId> parse_heads_option(const std::string& spec, const ModelConfig& mc) {
  try {
    return parse_heads(spec, mc.n_layers, mc.n_heads);
  } catch (const Error& e) {
    throw Error(std::string("--heads: ") + e.what());
  }
}

// The IPMR heatmaps first, then one group per example with the attention map of every chosen head.
std::vector<FigureGroup> draw_figures(const IpmrResult& ipmr, const AttentionMaps& maps, const CopyTask& task) {
  std::vector<FigureGroup> groups(1);
  groups[0].title = "IPMR per layer and head";
  for (int d : ipmr.deltas) {
    const std::string caption = "IPMR at delta=" + std::to_string(d) +
                                (d == 1 ? " (token after the earlier occurrence)" : " (key-shift offset)") +
                                "; chance " + svg::fmt(100 * ipmr.chance_head, 1) + "% per head";
    groups[0].figures.push_back({"ipmr_delta_" + std::to_string(d) + ".svg", caption, svg::heatmap(ipmr_heatmap(ipmr, d))});
  }
  for (size_t e = 0; e < maps.tokens.size(); e++) {
    FigureGroup g{"Attention on example " + std::to_string(e),
                  "Rows are queries, columns keys; outlined cells are where an induction head puts its attention.", {}};
    for (size_t h = 0; h < maps.heads.size(); h++) {
      const std::string name = maps.heads[h].name();
      const std::string svg = svg::heatmap(attention_heatmap(maps, int(e), int(h), task, ipmr.deltas, &ipmr));
      g.figures.push_back({"attention_ex" + std::to_string(e) + "_" + name + ".svg", name, svg});
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

int run_probe_command(const ProbeArgs& a) {
  CANONLAB_CHECK(a.examples >= 1 && a.examples <= kMaxExamples, "--examples " + std::to_string(a.examples) +
                                                                    " is out of range; allowed: 1.." + std::to_string(kMaxExamples));
  LoadedCheckpoint c = load_checkpoint(a.checkpoint, a.sets, Purpose::probe);
  const auto* task = dynamic_cast<const CopyTask*>(c.task.get());
  CANONLAB_CHECK(task, "probe measures induction on the copy task; '" + c.path + "' was trained on task '" +
                           c.task->name() + "'");
  const std::string mixers = mixer_letters(c.model->config());
  CANONLAB_CHECK(std::ranges::any_of(mixers, is_attention_letter),
                 "probe reads attention patterns, but '" + c.path + "' is a model of family '" + c.model->config().family +
                     "' without attention layers (layers: " + mixers + ")");
  // Checked before the probe runs, so a typo fails at once.
  std::vector<HeadId> heads = a.heads.empty() ? std::vector<HeadId>{} : parse_heads_option(a.heads, c.model->config());
  for (const HeadId& h : heads)
    CANONLAB_CHECK(is_attention_letter(mixers[size_t(h.layer)]),
                   "--heads: " + h.name() + " is in layer " + std::to_string(h.layer) + ", which is a '" +
                       std::string(1, mixers[size_t(h.layer)]) + "' layer, not attention (layers: " + mixers +
                       "; A and S have heads)");

  const ProbeResult probe = run_probe(*c.model, *task, c.cfg);
  const IpmrResult& ipmr = *probe.ipmr;
  std::string heads_source = "--heads";
  if (heads.empty()) {
    heads = default_heads(ipmr, kDefaultTopHeads);
    heads_source = "top " + std::to_string(kDefaultTopHeads) + " by IPMR at delta=1";
    for (int d : ipmr.deltas)
      if (d != 1) heads_source += ", plus the top head at delta=" + std::to_string(d) + " (key-shift offset)";
  }
  const AttentionMaps maps = capture_attention_maps(*c.model, probe_example_batch(*task, c.cfg, a.examples), heads);

  nlohmann::json j = probe.to_json();
  j["checkpoint"] = c.path;
  j["step"] = c.step;
  nlohmann::json head_names = nlohmann::json::array();
  for (const HeadId& h : heads) head_names.push_back(h.name());
  j["heads"] = head_names;
  j["heads_source"] = heads_source;
  j["examples_source"] = {{"seed", c.cfg.probe.seed}, {"note", "the first sequences of the IPMR probe's held-out stream"}};
  j["examples"] = attention_maps_to_json(maps, *task, ipmr.deltas);
  const std::string where = c.path + " (step " + std::to_string(c.step) + ")";
  const std::string text = "checkpoint " + where + "\n" + probe.eval_text() + probe.ipmr_text();

  const fs::path out = a.out.empty() ? default_out_dir(c.path) : fs::path(a.out);
  create_directories_at(out, "--out: cannot create the probe directory");
  remove_old_pictures(out);
  const std::vector<FigureGroup> groups = draw_figures(ipmr, maps, *task);
  size_t n_pictures = 0;
  for (const FigureGroup& g : groups)
    for (const Figure& f : g.figures) {
      write_text_atomic((out / f.file).string(), f.svg);
      n_pictures++;
    }
  write_text_atomic((out / "index.html").string(), probe_page_html("canonlab probe: " + where, text, groups));
  write_text_atomic((out / "probe.json").string(), j.dump(2) + "\n");
  // The maps in the run's TensorBoard files too, when the checkpoint is a run's (log.tensorboard).
  const fs::path run_dir = absolute_path(c.path, "checkpoint").parent_path().parent_path();
  const bool tensorboard = c.cfg.log.tensorboard && path_status(run_dir / "config.resolved.yaml").is_regular_file();
  if (tensorboard) write_probe_pictures(run_dir.string(), c.step, maps);

  if (a.json_out) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << text << "\nattention maps of";
  for (const HeadId& h : heads) std::cout << " " << h.name();
  std::cout << " (" << heads_source << ") on " << maps.tokens.size() << " held-out sequence(s)\n"
            << "wrote " << (out / "probe.json").string() << ", " << (out / "index.html").string() << " and "
            << n_pictures << " SVG pictures" << (tensorboard ? " (and the maps to " + (run_dir / "tb").string() + ")" : "")
            << "\n";
  return 0;
}

}  // namespace

Command add_probe_command(CLI::App& app) {
  auto a = std::make_shared<ProbeArgs>();
  CLI::App* sub = app.add_subcommand("probe", "Induction probes of a checkpoint: IPMR per head, attention maps of "
                                              "chosen heads; JSON, SVG pictures and an HTML page");
  sub->add_option("checkpoint", a->checkpoint, "A run directory, its checkpoints/ or a .model.safetensors file")
      ->required();
  sub->add_option("--heads", a->heads, "Heads to draw attention maps of, e.g. L0H1,L3H3 (default: the top " +
                                           std::to_string(kDefaultTopHeads) + " by IPMR at delta=1, plus the top "
                                           "head at the key-shift offset)");
  sub->add_option("--examples", a->examples, "Held-out sequences to draw attention maps on, 1.." + std::to_string(kMaxExamples) + " (default 2)");
  sub->add_option("--set", a->sets, "Probe on a changed task: --set task.n_symbols=32 (repeatable; task.*, train.*, probe.*)");
  sub->add_option("--out", a->out, "Output directory (default: RUN_DIR/probe)");
  sub->add_flag("--json", a->json_out, "Print probe.json instead of the text report");
  return {sub, [a] { return run_probe_command(*a); }};
}

}  // namespace canonlab::cli
