#include "train/tensorboard_log.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/tensorboard/event_file.h"
#include "io/tensorboard/summaries.h"

namespace canonlab {

namespace fs = std::filesystem;
namespace tb = tensorboard;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Markdown: the text dashboard renders a block indented by four spaces verbatim.
std::string as_code_block(const std::string& text) {
  std::string out = "    ";
  for (const char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

// An event file of ours of one kind: the run's ("canonlab", "canonlab.<n>") or the probe's ("canonlab-probe").
bool is_event_file(const fs::path& path, const std::string& kind) {
  const std::string name = path.filename().string();
  if (!name.starts_with("events.out.tfevents.") || name.find(".tmp.") != std::string::npos) return false;
  const size_t at = name.rfind("." + kind);
  if (at == std::string::npos) return false;
  const std::string rest = name.substr(at + 1 + kind.size());
  return rest.empty() || (rest[0] == '.' && rest.size() > 1 && rest.find_first_not_of("0123456789", 1) == std::string::npos);
}

// Writes `events` as a new event file of `kind` in run_dir/tb (created if missing), whole and atomically, then removes
// the older files of that kind, which it replaces. Returns the new file's path: named after `wall_time`, numbered
// where an older file of the same second has the name.
std::string replace_event_files(const std::string& run_dir, const std::string& kind,
                                const std::vector<tb::Event>& events, double wall_time) {
  const fs::path dir = fs::path(run_dir) / "tb";
  create_directories_at(dir, "cannot create the TensorBoard directory");
  std::error_code ec;
  std::vector<fs::path> older;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (is_event_file(e.path(), kind)) older.push_back(e.path());
  std::string name = tb::event_file_name(wall_time, kind);
  for (int i = 1; std::find(older.begin(), older.end(), dir / name) != older.end(); i++)
    name = tb::event_file_name(wall_time, kind + "." + std::to_string(i));
  const std::string path = (dir / name).string();
  write_text_atomic(path, tb::framed_events(events));
  for (const fs::path& p : older) fs::remove(p, ec);  // a failure leaves a file TensorBoard's restart marker voids
  return path;
}

// The scalar events of one metrics record (also what a resume rebuilds from the kept records).
std::vector<tb::Event> metrics_record_events(const nlohmann::json& record, double wall_time) {
  std::vector<tb::Event> events;
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) return events;
  const int64_t step = record["step"].get<int64_t>();
  const std::string split = record.contains("split") && record["split"].is_string() ? record["split"].get<std::string>()
                                                                                     : "train";
  for (const auto& [key, value] : record.items()) {
    if (key == "step" || key == "elapsed_s" || !value.is_number()) continue;
    events.push_back(tb::scalar_event(wall_time, step, split + "/" + key, value.get<float>()));
  }
  return events;
}

}  // namespace

TensorBoardLog::~TensorBoardLog() = default;
TensorBoardLog::TensorBoardLog(TensorBoardLog&&) noexcept = default;
const std::string& TensorBoardLog::path() const { return file_->path(); }

TensorBoardLog::TensorBoardLog(const std::string& run_dir, const std::vector<nlohmann::json>& kept,
                               const std::string& config_yaml) {
  const double t = now_seconds();
  // A resumed or --force'd run's earlier file is replaced by this one, which holds the records the run keeps.
  std::vector<tb::Event> events = {tb::file_version_event(t), tb::restart_event(t, 0),
                                   tb::text_event(t, 0, "config", as_code_block(config_yaml))};
  for (const nlohmann::json& record : kept)
    for (tb::Event& e : metrics_record_events(record, t)) events.push_back(std::move(e));
  const std::string path = replace_event_files(run_dir, "canonlab", events, t);
  file_ = std::make_unique<tb::EventFile>(path);
}

void TensorBoardLog::write(const nlohmann::json& record) {
  for (const tb::Event& e : metrics_record_events(record, now_seconds())) file_->write(e);
}

void TensorBoardLog::write_ipmr(int step, const IpmrResult& ipmr, const std::string& table_text) {
  const double t = now_seconds();
  file_->write(tb::text_event(t, step, "probe/ipmr", as_code_block(table_text)));
  constexpr int kCell = 24;
  for (const auto& [delta, rates] : ipmr.per_head)
    file_->write(tb::image_event(t, step, "probe/ipmr_delta_" + std::to_string(delta),
                                 heatmap_image(rates, ipmr.n_layers, ipmr.n_heads, kCell)));
}

void write_probe_pictures(const std::string& run_dir, int step, const AttentionMaps& maps) {
  const double t = now_seconds();
  const int T = maps.seq_len, cell = std::max(1, 200 / std::max(T, 1));
  std::vector<tb::Event> events = {tb::file_version_event(t)};
  for (size_t e = 0; e < maps.probs.size(); e++)
    for (size_t h = 0; h < maps.heads.size(); h++) {
      const std::span<const float> p = maps.map(int(e), int(h));
      const std::vector<double> values(p.begin(), p.end());
      events.push_back(tb::image_event(t, step, "probe/attention/ex" + std::to_string(e) + "/" + maps.heads[h].name(),
                                       heatmap_image(values, T, T, cell)));
    }
  replace_event_files(run_dir, "canonlab-probe", events, t);
}

RgbImage heatmap_image(const std::vector<double>& rates, int rows, int cols, int cell) {
  CANONLAB_CHECK(rows > 0 && cols > 0 && rates.size() == size_t(rows) * size_t(cols),
                 "heatmap_image: " + std::to_string(rates.size()) + " values for " + std::to_string(rows) + " x " +
                     std::to_string(cols) + " cells");
  // Stops of a viridis-like map: dark blue, teal, green, yellow.
  constexpr double kStops[4][3] = {{68, 1, 84}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  RgbImage img;
  img.width = cols * (cell + 1) + 1;
  img.height = rows * (cell + 1) + 1;
  img.rgb.assign(size_t(img.width) * img.height * 3, 255);  // the grid lines stay white
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      double v = rates[size_t(r) * cols + c];
      v = std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0;
      const double x = v * 3;
      const int i = std::min(int(x), 2);
      const double f = x - i;
      uint8_t rgb[3];
      for (int k = 0; k < 3; k++) rgb[k] = uint8_t(std::lround(kStops[i][k] + f * (kStops[i + 1][k] - kStops[i][k])));
      for (int y = 0; y < cell; y++)
        for (int xx = 0; xx < cell; xx++) {
          const size_t p = (size_t(1 + r * (cell + 1) + y) * img.width + 1 + c * (cell + 1) + xx) * 3;
          std::copy(rgb, rgb + 3, img.rgb.begin() + p);
        }
    }
  return img;
}

}  // namespace canonlab
