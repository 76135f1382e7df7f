// What the user sees of a run while it trains.
//
// On a terminal: one status line, redrawn in place ('\r' and erase-to-end "\x1b[K"):
//   [##########..........] step 40/200  loss 0.4213  lr 0.001  1234 samples/s  eta 0:12
// at most about 10 redraws a second (the last step is always drawn); finish() ends the line.
// Not a terminal (a log file, a pipe, CI): the same fields as plain lines, every log_every steps
// plus the first and the last, with no '\r' and no escape codes:
//   step 40/200  loss 0.4213  lr 0.001  1234 samples/s  eta 0:12
// message() prints a line of its own (a checkpoint, an evaluation) without breaking the bar.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace onnxdp {

class ProgressReporter {
 public:
  // total_steps: the run's last step (the bar's 100 %). tty: draw the bar (the caller passes
  // isatty(fileno(out))). log_every: steps between plain lines (<= 0: about 10 lines a run).
  ProgressReporter(int64_t total_steps, bool tty, int64_t log_every, std::FILE* out = stdout);

  // Step `step` (1-based) is done. The ETA comes from the average time per step since the first
  // update (a resumed run starts counting at its first step).
  void update(int64_t step, float loss, float lr, double samples_per_s);
  // A line of its own: on a terminal the bar is cleared, the line printed, the bar redrawn.
  void message(const std::string& line);
  // Ends the bar's line (terminal); idempotent.
  void finish();

  // "m:ss" below an hour, "h:mm:ss" from one hour on; "?" for a negative or non-finite time.
  static std::string format_eta(double seconds);

 private:
  using Clock = std::chrono::steady_clock;
  std::string status(int64_t step) const;  // "step 40/200  loss …  eta …" of the last update
  void draw();                             // the bar line, from '\r' to "\x1b[K"

  int64_t total_;
  bool tty_;
  int64_t log_every_;
  std::FILE* out_;
  // The last update.
  int64_t step_ = 0;
  float loss_ = 0, lr_ = 0;
  double samples_per_s_ = 0;
  // Timing: the first update's step and time, for the average step time.
  bool started_ = false;
  int64_t first_step_ = 0;
  Clock::time_point first_time_, last_draw_;
  double eta_s_ = -1;
  bool drawn_ = false;      // the last update is on screen (a bar drawn, a line printed)
  bool bar_shown_ = false;  // the bar is on the current line (terminal)
  bool finished_ = false;
};

}  // namespace onnxdp
