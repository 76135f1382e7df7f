#include "train/progress.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace onnxdp {

namespace {
constexpr int kBarWidth = 20;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);  // at most ~10 redraws a second
}  // namespace

ProgressReporter::ProgressReporter(int64_t total_steps, bool tty, int64_t log_every, std::FILE* out)
    : total_(total_steps), tty_(tty), log_every_(log_every > 0 ? log_every : std::max<int64_t>(1, total_steps / 10)),
      out_(out), first_time_(Clock::now()) {}

std::string ProgressReporter::format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = int64_t(std::llround(seconds));
  if (s < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

std::string ProgressReporter::status(int64_t step) const {
  std::string total = total_ > 0 ? fmt::format("/{}", total_) : "";
  return fmt::format("step {}{}  loss {:.4f}  lr {:g}  {:.0f} samples/s  eta {}", step, total, loss_, lr_, samples_per_s_,
                     format_eta(eta_s_));
}

void ProgressReporter::draw() {
  int filled = 0;
  if (total_ > 0) filled = int(std::clamp<int64_t>(step_ * kBarWidth / total_, 0, kBarWidth));
  std::string bar = std::string(size_t(filled), '#') + std::string(size_t(kBarWidth - filled), '.');
  std::fprintf(out_, "\r[%s] %s\x1b[K", bar.c_str(), status(step_).c_str());
  std::fflush(out_);
  bar_shown_ = true;
  last_draw_ = Clock::now();
}

void ProgressReporter::update(int64_t step, float loss, float lr, double samples_per_s) {
  Clock::time_point now = Clock::now();
  bool first = !started_;
  if (first) {
    // The time since construction covers this first step (the caller makes the reporter just
    // before the loop), so there is an ETA from the first line on.
    started_ = true;
    first_step_ = step;
  }
  step_ = step;
  loss_ = loss;
  lr_ = lr;
  samples_per_s_ = samples_per_s;
  double elapsed = std::chrono::duration<double>(now - first_time_).count();
  int64_t done = step - first_step_ + 1;
  eta_s_ = total_ > 0 && done > 0 ? elapsed / double(done) * double(std::max<int64_t>(0, total_ - step)) : -1;
  finished_ = false;

  bool last = total_ > 0 && step >= total_;
  if (tty_) {
    drawn_ = first || last || now - last_draw_ >= kRedrawEvery;
    if (drawn_) draw();
    return;
  }
  drawn_ = first || step == 1 || last || step % log_every_ == 0;
  if (drawn_) {
    std::fprintf(out_, "%s\n", status(step).c_str());
    std::fflush(out_);
  }
}

void ProgressReporter::message(const std::string& line) {
  if (tty_ && bar_shown_) {
    std::fprintf(out_, "\r\x1b[K%s\n", line.c_str());
    draw();
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }
}

void ProgressReporter::finish() {
  if (finished_) return;
  finished_ = true;
  // A run that stopped between drawn steps still shows where it stopped.
  if (started_ && !drawn_) {
    if (tty_) draw();
    else std::fprintf(out_, "%s\n", status(step_).c_str());
    drawn_ = true;
  }
  if (tty_ && bar_shown_) std::fprintf(out_, "\n");
  bar_shown_ = false;
  std::fflush(out_);
}

}  // namespace onnxdp
