#include "eval/ipmr.h"

#include "config/model_shapes.h"
#include "eval/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace canonlab {

std::vector<std::tuple<int, int, double>> IpmrResult::top_heads(int delta, int k) const {
  std::vector<std::tuple<int, int, double>> heads;
  const std::vector<double>& rates = per_head.at(delta);
  for (int l = 0; l < n_layers; l++) {
    if (!layer_mixers.empty() && !is_attention_letter(layer_mixers[size_t(l)])) continue;
    for (int h = 0; h < n_heads; h++) heads.emplace_back(l, h, rates[size_t(l) * n_heads + h]);
  }
  std::stable_sort(heads.begin(), heads.end(), [](auto& a, auto& b) { return std::get<2>(a) > std::get<2>(b); });
  if (int(heads.size()) > k) heads.resize(k);
  return heads;
}

IpmrResult measure_ipmr(LanguageModel<float>& model, const CopyTask& task, const RunConfig& cfg) {
  const ModelConfig& mc = model.config();
  IpmrResult r;
  r.n_layers = mc.n_layers;
  r.n_heads = mc.n_heads;
  r.layer_mixers = mixer_letters(mc);
  r.attention_heads = int(std::count_if(r.layer_mixers.begin(), r.layer_mixers.end(), is_attention_letter)) * mc.n_heads;
  std::set<int> deltas{1};
  if (!cfg.model.attention.key_shift.layers.empty()) deltas.insert(cfg.model.attention.key_shift.offset);
  r.deltas.assign(deltas.begin(), deltas.end());

  const int n = task.n_symbols(), T = task.seq_len(), L = mc.n_layers, H = mc.n_heads;
  const int q_begin = task.first_query(), q_end = task.last_query();  // inclusive
  const int nq = std::max(0, q_end - q_begin + 1);
  std::map<int, std::vector<double>> hits;
  for (int d : r.deltas) hits[d].assign(size_t(L) * H, 0.0);
  std::map<int, double> global_hits;
  double copy_hits = 0, copy_count = 0;

  const int total = cfg.probe.n_sequences;
  const int chunk = std::max(1, cfg.train.batch_size);
  Arena arena(model.backend().memory());
  std::vector<float> host_logits;
  std::map<int, std::vector<uint8_t>> any_hit;  // delta -> (B * nq) for the current chunk
  std::map<int, double> confident_hits;
  std::vector<float> peak_prob;  // (B * nq): the highest attention peak over the heads seen so far
  std::vector<int> peak_key;     // (B * nq): where that head's argmax is
  for (int start = 0, chunk_id = 0; start < total; start += chunk, chunk_id++) {
    const int B = std::min(chunk, total - start);
    Batch batch = task.make_batch(B, cfg.probe.seed, kHeldOutStream + 1000 + uint64_t(chunk_id));
    for (int d : r.deltas) any_hit[d].assign(size_t(B) * nq, 0);
    peak_prob.assign(size_t(B) * nq, -1.0f);
    peak_key.assign(size_t(B) * nq, -1);
    arena.reset();
    StepContext<float> ctx{arena, model.backend()};
    ctx.on_attention_probs = [&](int layer, const float* probs, int Bc, int Hc, int Tc) {
      for (int b = 0; b < Bc; b++)
        for (int h = 0; h < Hc; h++)
          for (int q = q_begin; q <= q_end; q++) {
            const float* row = probs + ((size_t(b) * Hc + h) * Tc + q) * Tc;
            int best = 0;
            for (int k = 1; k <= q; k++)
              if (row[k] > row[best]) best = k;
            const int p = q - n;
            const size_t query = size_t(b) * nq + (q - q_begin);
            if (row[best] > peak_prob[query]) {  // layers arrive in order, so ties keep the earliest head
              peak_prob[query] = row[best];
              peak_key[query] = best;
            }
            for (int d : r.deltas)
              if (best == p + d) {
                hits[d][size_t(layer) * Hc + h] += 1;
                any_hit[d][size_t(b) * nq + (q - q_begin)] = 1;
              }
          }
    };
    const float* device_logits = model.forward(ctx, ctx.upload(std::span<const int>(batch.tokens)), B, T);
    const float* logits =
        host_view(arena.memory(), device_logits, size_t(B) * T * model.vocab_size(), host_logits).data();
    for (int d : r.deltas) {
      for (uint8_t v : any_hit[d]) global_hits[d] += v;
      for (int b = 0; b < B; b++)
        for (int q = q_begin; q <= q_end; q++) confident_hits[d] += peak_key[size_t(b) * nq + (q - q_begin)] == q - n + d;
    }
    MetricSums sums;
    std::vector<float> task_logits;
    task.score(batch, logits_over_task_vocab(logits, B * T, model.vocab_size(), task.vocab_size(), task_logits), 0, sums);
    copy_hits += sums["copy_acc"].sum;
    copy_count += sums["copy_acc"].count;
  }
  r.n_sequences = total;
  r.n_queries = total * nq;
  for (int d : r.deltas) {
    std::vector<double>& rates = r.per_head[d];
    rates = hits[d];
    double sum = 0;
    for (double& x : rates) {
      x /= std::max(1, r.n_queries);
      sum += x;
    }
    r.mean[d] = sum / std::max(1, r.attention_heads);
    r.global[d] = global_hits[d] / std::max(1, r.n_queries);
    r.confident[d] = confident_hits[d] / std::max(1, r.n_queries);
  }
  double ch = 0, chg = 0;
  for (int q = q_begin; q <= q_end; q++) {
    ch += 1.0 / (q + 1);
    chg += 1.0 - std::pow(1.0 - 1.0 / (q + 1), r.attention_heads);
  }
  r.chance_head = nq ? ch / nq : 0;
  r.chance_global = nq ? chg / nq : 0;
  r.copy_acc = copy_count > 0 ? copy_hits / copy_count : 0;
  return r;
}

namespace {
std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}
}  // namespace

std::string format_ipmr(const IpmrResult& r, int top_k) {
  std::ostringstream os;
  os << "copy_acc " << pct(r.copy_acc) << " on " << r.n_sequences << " held-out sequences (" << r.n_queries
     << " queries)\n";
  for (int d : r.deltas) {
    os << "\nIPMR at delta=" << d << (d == 1 ? " (induction target: token after the earlier occurrence)" : " (key-shift offset)")
       << "\n      ";
    for (int h = 0; h < r.n_heads; h++) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%8s", ("H" + std::to_string(h)).c_str());
      os << buf;
    }
    os << "\n";
    for (int l = 0; l < r.n_layers; l++) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "  L%-3d", l);
      os << buf;
      for (int h = 0; h < r.n_heads; h++) {
        std::snprintf(buf, sizeof buf, "%8s", pct(r.per_head.at(d)[size_t(l) * r.n_heads + h]).c_str());
        os << buf;
      }
      os << "\n";
    }
    os << "  top heads:";
    for (auto& [l, h, v] : r.top_heads(d, top_k)) os << " L" << l << "H" << h << " " << pct(v);
    os << "\n  mean over heads " << pct(r.mean.at(d)) << " (chance " << pct(r.chance_head) << ")"
       << "\n  confident-head IPMR " << pct(r.confident.at(d)) << " (per query, the head with the highest attention peak)"
       << "\n  global_ipmr " << pct(r.global.at(d)) << " (chance " << pct(r.chance_global) << " for "
       << r.n_layers * r.n_heads << " independent uniform heads; " << pct(r.chance_head) << " per head)\n";
  }
  return os.str();
}

nlohmann::json ipmr_to_json(const IpmrResult& r, int top_k) {
  nlohmann::json j;
  j["copy_acc"] = r.copy_acc;
  j["n_sequences"] = r.n_sequences;
  j["n_queries"] = r.n_queries;
  j["chance_head"] = r.chance_head;
  j["chance_global"] = r.chance_global;
  for (int d : r.deltas) {
    nlohmann::json e;
    std::vector<std::vector<double>> matrix(r.n_layers);
    for (int l = 0; l < r.n_layers; l++)
      matrix[l].assign(r.per_head.at(d).begin() + size_t(l) * r.n_heads,
                       r.per_head.at(d).begin() + size_t(l + 1) * r.n_heads);
    e["per_head"] = matrix;
    e["mean"] = r.mean.at(d);
    e["global"] = r.global.at(d);
    e["confident"] = r.confident.at(d);
    nlohmann::json top = nlohmann::json::array();
    for (auto& [l, h, v] : r.top_heads(d, top_k)) top.push_back({{"layer", l}, {"head", h}, {"rate", v}});
    e["top_heads"] = top;
    j["delta_" + std::to_string(d)] = e;
  }
  return j;
}

}  // namespace canonlab
