#pragma once
// A one-line progress bar on stderr: step, bar, loss, tokens/s, ETA (and the last eval metrics).
// When stderr is not a terminal it prints a plain line every few seconds instead of redrawing.
#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace canonlab {

class Progress {
 public:
  // enabled=false prints nothing (tests, --quiet); interactive redraws one line, else a line every 5 s.
  Progress(int total_steps, bool enabled, bool interactive, std::string headline_metric)
      : total_(total_steps), enabled_(enabled), interactive_(interactive), headline_(std::move(headline_metric)) {}

  void update(int step, double loss, double tokens_per_s, const nlohmann::json& eval) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_print_).count();
    if (step != total_ && since < (interactive_ ? 0.1 : 5.0)) return;
    last_print_ = now;
    if (first_step_ < 0) {
      first_step_ = step;
      start_ = now;
    }
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = step > first_step_ ? (step - first_step_) / std::max(elapsed, 1e-9) : 0;
    const double eta = rate > 0 ? (total_ - step) / rate : 0;
    constexpr int width = 24;
    const int filled = total_ > 0 ? int(double(width) * step / total_) : width;
    std::string bar(filled, '=');
    if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
    std::string extra;
    if (eval.contains(headline_)) {
      char buf[96];
      const double v = eval[headline_].get<double>();
      const bool rate = headline_.find("acc") != std::string::npos;
      std::snprintf(buf, sizeof buf, rate ? " | eval %s %.1f%%" : " | eval %s %.4g", headline_.c_str(), rate ? 100.0 * v : v);
      extra = buf;
    }
    std::fprintf(stderr, "%sstep %d/%d [%s] loss %.4f | %.1fk tok/s | ETA %s%s%s", interactive_ ? "\r\033[K" : "",
                 step, total_, bar.c_str(), loss, tokens_per_s / 1000.0, format_duration(eta).c_str(), extra.c_str(),
                 interactive_ ? "" : "\n");
    std::fflush(stderr);
  }
  // A line of its own above the bar (what the run decided while running, e.g. a GPU's attention kernel).
  void note(const std::string& line) {
    if (!enabled_) return;
    std::fprintf(stderr, "%s%s\n", interactive_ ? "\r\033[K" : "", line.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_ && interactive_) std::fprintf(stderr, "\n");
  }

 private:
  static std::string format_duration(double s) {
    char buf[32];
    const int t = int(s + 0.5);
    if (t >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", t / 3600, t / 60 % 60);
    else if (t >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", t / 60, t % 60);
    else std::snprintf(buf, sizeof buf, "%ds", t);
    return buf;
  }

  int total_;
  bool enabled_, interactive_;
  std::string headline_;
  int first_step_ = -1;
  std::chrono::steady_clock::time_point start_{}, last_print_{};
};

}  // namespace canonlab
