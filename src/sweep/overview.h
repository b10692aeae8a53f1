#pragma once
// The sweep's live overview on stderr: counts of done / running / failed / pending runs, elapsed time, an ETA,
// and one line per running run. On a terminal it redraws in place; elsewhere (CI logs, nohup) it prints one
// line per event and a status line every 30 seconds.
#include <chrono>
#include <string>
#include <vector>

namespace canonlab {

struct RunView {
  enum class State { pending, running, done, failed };
  std::string name;
  State state = State::pending;
  int step = 0, steps = 0;
  double seconds_per_step = 0;  // measured while it runs; 0 = not yet known
};

class Overview {
 public:
  Overview(std::string sweep_name, int total, int jobs, std::string threads_per_run, bool live);
  void draw(const std::vector<RunView>& runs, std::chrono::steady_clock::duration elapsed, bool final = false);
  void event(const std::string& line);    // "done layer=L0__seed=0"
  void message(const std::string& line);  // printed as is, after the overview

 private:
  std::string status_line(const std::vector<RunView>& runs, std::chrono::steady_clock::duration elapsed) const;
  void erase_block();

  std::string name_, threads_;
  int total_, jobs_;
  bool live_;
  int drawn_lines_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1h02m", "4m10s", "12s"
std::string format_duration(double seconds);

}  // namespace canonlab
