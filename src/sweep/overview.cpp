#include "sweep/overview.h"

#include <cstdio>
#include <iostream>

namespace canonlab {

using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long s = long(seconds + 0.5);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%lds", s);
  return text;
}

Overview::Overview(std::string sweep_name, int total, int jobs, std::string threads_per_run, bool live)
    : name_(std::move(sweep_name)), threads_(std::move(threads_per_run)), total_(total), jobs_(jobs), live_(live) {
  std::cerr << "sweep " << name_ << ": " << total_ << " runs, " << jobs_ << " at a time, " << threads_
            << " thread(s) each\n";
}

std::string Overview::status_line(const std::vector<RunView>& runs, Clock::duration elapsed) const {
  int done = 0, running = 0, failed = 0, pending = 0;
  double seconds_per_step = 0, remaining_steps = 0;
  int measured = 0;
  for (const RunView& r : runs) {
    switch (r.state) {
      case RunView::State::done: done++; break;
      case RunView::State::running: running++; break;
      case RunView::State::failed: failed++; break;
      case RunView::State::pending: pending++; break;
    }
    if (r.state == RunView::State::running || r.state == RunView::State::pending) remaining_steps += r.steps - r.step;
    if (r.seconds_per_step > 0) {
      seconds_per_step += r.seconds_per_step;
      measured++;
    }
  }
  // Runs of one sweep usually cost about the same per step, so the mean measured rate prices what is left.
  std::string eta = "?";
  if (measured > 0) eta = format_duration(remaining_steps * (seconds_per_step / measured) / std::max(1, std::min(jobs_, running + pending)));
  if (running + pending == 0) eta = "0s";
  char line[256];
  std::snprintf(line, sizeof line, "%s: %d/%d done, %d running, %d failed, %d pending | elapsed %s | ETA %s",
                name_.c_str(), done, total_, running, failed, pending,
                format_duration(std::chrono::duration<double>(elapsed).count()).c_str(), eta.c_str());
  return line;
}

void Overview::erase_block() {
  if (live_ && drawn_lines_ > 0) std::cerr << "\033[" << drawn_lines_ << "A\033[J";
  drawn_lines_ = 0;
}

void Overview::draw(const std::vector<RunView>& runs, Clock::duration elapsed, bool final) {
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (!final && since < (live_ ? 0.5 : 30.0)) return;
  last_draw_ = now;
  erase_block();
  std::string block = status_line(runs, elapsed) + "\n";
  if (live_ && !final) {
    for (const RunView& r : runs) {
      if (r.state != RunView::State::running) continue;
      char line[256];
      const double left = r.seconds_per_step > 0 ? (r.steps - r.step) * r.seconds_per_step : -1;
      std::snprintf(line, sizeof line, "  > %-40s step %6d/%-6d %3d%%  %s left\n", r.name.c_str(), r.step, r.steps,
                    r.steps > 0 ? 100 * r.step / r.steps : 0, format_duration(left).c_str());
      block += line;
    }
  }
  std::cerr << block << std::flush;
  if (live_ && !final)
    for (char c : block) drawn_lines_ += c == '\n';
}

void Overview::event(const std::string& line) {
  erase_block();
  std::cerr << line << "\n" << std::flush;
  if (live_) last_draw_ = {};  // redraw the block under it at once
}

void Overview::message(const std::string& line) {
  erase_block();
  std::cerr << line << "\n" << std::flush;
}

}  // namespace canonlab
