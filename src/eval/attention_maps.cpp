#include "eval/attention_maps.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "engine/error.h"

namespace canonlab {

std::string HeadId::name() const { return 'L' + std::to_string(layer) + 'H' + std::to_string(head); }

namespace {

// Reads the digits at s[pos...]; returns false when there are none.
bool read_int(std::string_view s, size_t& pos, int& value) {
  const char* begin = s.data() + pos;
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), value);
  if (ec != std::errc() || end == begin) return false;
  pos += size_t(end - begin);
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

HeadId parse_head(std::string_view item, int n_layers, int n_heads, const std::string& valid) {
  HeadId id;
  size_t pos = 0;
  const bool well_formed = pos < item.size() && std::toupper(static_cast<unsigned char>(item[pos++])) == 'L' &&
                           read_int(item, pos, id.layer) && pos < item.size() &&
                           std::toupper(static_cast<unsigned char>(item[pos++])) == 'H' &&
                           read_int(item, pos, id.head) && pos == item.size();
  CANONLAB_CHECK(well_formed, "head '" + std::string(item) + "' is not of the form L<layer>H<head> (e.g. L3H3); " +
                                  "this model has " + valid);
  CANONLAB_CHECK(id.layer >= 0 && id.layer < n_layers && id.head >= 0 && id.head < n_heads,
                 "head '" + std::string(item) + "' does not exist; this model has " + valid);
  return id;
}

}  // namespace

std::vector<HeadId> parse_heads(std::string_view spec, int n_layers, int n_heads) {
  const std::string last = HeadId{n_layers - 1, n_heads - 1}.name();
  const std::string valid = "layers 0.." + std::to_string(n_layers - 1) + " and heads 0.." +
                            std::to_string(n_heads - 1) + " (L0H0.." + last + ")";
  std::vector<HeadId> heads;
  while (true) {
    const size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    CANONLAB_CHECK(!item.empty(), "empty entry in a comma-separated head list such as L0H1,L3H3; this model has " + valid);
    const HeadId id = parse_head(item, n_layers, n_heads, valid);
    if (std::find(heads.begin(), heads.end(), id) == heads.end()) heads.push_back(id);
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return heads;
}

std::vector<HeadId> default_heads(const IpmrResult& ipmr, int k) {
  std::vector<HeadId> heads;
  auto add = [&](int layer, int head) {
    const HeadId id{layer, head};
    if (std::find(heads.begin(), heads.end(), id) == heads.end()) heads.push_back(id);
  };
  for (auto& [l, h, rate] : ipmr.top_heads(1, k)) add(l, h);
  for (int d : ipmr.deltas)
    if (d != 1)
      for (auto& [l, h, rate] : ipmr.top_heads(d, 1)) add(l, h);
  return heads;
}

std::vector<Cell> induction_targets(std::span<const int> tokens, int first_query, int last_query, int delta) {
  std::vector<Cell> cells;
  for (int q = std::max(first_query, 0); q <= last_query && q < int(tokens.size()); q++) {
    int p = q - 1;
    while (p >= 0 && tokens[p] != tokens[q]) p--;
    if (p >= 0 && p + delta <= q) cells.push_back({q, p + delta});
  }
  return cells;
}

Batch probe_example_batch(const CopyTask& task, const RunConfig& cfg, int n) {
  CANONLAB_CHECK(n >= 1, "number of example sequences must be >= 1, got " + std::to_string(n));
  // Must mirror measure_ipmr's draw (eval/ipmr.cpp); tests/unit/test_probe.cpp checks that it does.
  const int chunk = std::max(1, cfg.train.batch_size);
  Batch batch;
  batch.resize(n, task.seq_len());
  for (int i = 0; i < n; i++)
    task.sample(batch, i, cfg.probe.seed, kHeldOutStream + 1000 + uint64_t(i / chunk), uint64_t(i % chunk));
  return batch;
}

AttentionMaps capture_attention_maps(LanguageModel<float>& model, const Batch& batch, std::span<const HeadId> heads) {
  const int T = batch.T, n_heads = model.config().n_heads;
  AttentionMaps maps;
  maps.seq_len = T;
  maps.heads.assign(heads.begin(), heads.end());
  maps.probs.assign(batch.B, std::vector<std::vector<float>>(heads.size()));
  for (int b = 0; b < batch.B; b++) maps.tokens.emplace_back(batch.tokens.begin() + size_t(b) * T, batch.tokens.begin() + size_t(b + 1) * T);
  std::vector<bool> reported(heads.size(), false);

  Arena arena(model.backend().memory());
  StepContext<float> ctx{arena, model.backend()};
  ctx.on_attention_probs = [&](int layer, const float* probs, int B, int H, int Tn) {
    CANONLAB_CHECK(B == batch.B && H == n_heads && Tn == T, "attention layer " + std::to_string(layer) +
                                                                " reported probabilities of an unexpected shape");
    for (size_t i = 0; i < heads.size(); i++) {
      if (heads[i].layer != layer) continue;
      for (int b = 0; b < B; b++) {
        const float* src = probs + (size_t(b) * H + heads[i].head) * size_t(T) * T;  // (B, H, T, T)
        maps.probs[b][i].assign(src, src + size_t(T) * T);
      }
      reported[i] = true;
    }
  };
  model.forward(ctx, ctx.upload(std::span<const int>(batch.tokens)), batch.B, T);
  for (size_t i = 0; i < heads.size(); i++)
    CANONLAB_CHECK(reported[i], "layer " + std::to_string(heads[i].layer) + " reported no attention probabilities (head " +
                                    heads[i].name() + "); is it an attention layer?");
  return maps;
}

nlohmann::json attention_maps_to_json(const AttentionMaps& maps, const CopyTask& task, std::span<const int> deltas) {
  const int T = maps.seq_len;
  nlohmann::json examples = nlohmann::json::array();
  for (size_t e = 0; e < maps.tokens.size(); e++) {
    const std::vector<int>& tokens = maps.tokens[e];
    nlohmann::json ex;
    ex["index"] = e;
    ex["tokens"] = tokens;
    nlohmann::json text = nlohmann::json::array();
    for (int t : tokens) text.push_back(task.token_text(t));
    ex["token_text"] = text;
    for (int d : deltas) {
      nlohmann::json cells = nlohmann::json::array();
      for (const Cell& c : induction_targets(tokens, task.first_query(), task.last_query(), d))
        cells.push_back({c.query, c.key});
      ex["induction_targets"]["delta_" + std::to_string(d)] = cells;
    }
    nlohmann::json attention = nlohmann::json::object();
    for (size_t h = 0; h < maps.heads.size(); h++) {
      std::span<const float> m = maps.map(int(e), int(h));
      nlohmann::json rows = nlohmann::json::array();
      for (int q = 0; q < T; q++) rows.push_back(std::vector<float>(m.begin() + size_t(q) * T, m.begin() + size_t(q + 1) * T));
      attention[maps.heads[h].name()] = rows;
    }
    ex["attention"] = attention;
    examples.push_back(ex);
  }
  return examples;
}

}  // namespace canonlab
