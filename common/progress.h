// Progress: a progress display for long-running work (downloads, imports,
// benchmark sweeps).
//
// On a terminal it redraws one line in place ("\r", a bar, count, rate and
// ETA) at most every `tty_interval`. Otherwise (a log file, a pipe, CI) it
// prints a plain line every `plain_interval` (5 s by default) and one final
// line, so logs stay readable. Lines are printed from Advance() and Finish();
// nothing is printed while no progress is made.
//
// Thread safety: Advance() may be called from many threads at once; it is a
// relaxed atomic add unless a line is due. Finish() and the destructor must
// not race with Advance().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>

namespace flashroll {

struct ProgressOptions {
  enum class Mode {
    kAuto,  // kTty when writing to stderr and stderr is a terminal, else kPlain
    kTty,
    kPlain,
  };
  Mode mode = Mode::kAuto;
  // Where lines go; nullptr means std::cerr. Must outlive the Progress.
  std::ostream* out = nullptr;
  std::string unit = "items";
  std::chrono::milliseconds plain_interval{5000};
  std::chrono::milliseconds tty_interval{100};
  // The time source; empty means std::chrono::steady_clock::now. Tests inject
  // a fake clock to make the plain-line schedule deterministic.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

class Progress {
 public:
  // `total` is the expected count; 0 means unknown (no bar, percentage or ETA).
  Progress(std::string label, uint64_t total, ProgressOptions options = {});
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // Calls Finish() if it has not been called.
  ~Progress();

  // Adds `n` to the count and prints a line if one is due.
  void Advance(uint64_t n = 1);

  // Prints the final line (count, elapsed time, average rate); later calls,
  // and Advance() after it, print nothing.
  void Finish();

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  bool tty() const { return tty_; }

 private:
  std::chrono::steady_clock::time_point Now() const;
  // Formats the periodic line for `count` at time `now`.
  std::string FormatLine(uint64_t count, std::chrono::steady_clock::time_point now) const;
  void Draw(uint64_t count, std::chrono::steady_clock::time_point now);  // requires mu_

  // Constant after construction.
  const std::string label_;
  const uint64_t total_;
  ProgressOptions options_;
  std::ostream* out_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::nanoseconds interval_;

  std::atomic<uint64_t> count_{0};
  // When the next line is due, in nanoseconds since start_; read without the
  // lock as a cheap filter, written under mu_.
  std::atomic<int64_t> next_draw_ns_;

  std::mutex mu_;
  bool finished_ = false;  // guarded by mu_
};

// "12s", "3m05s", "1h02m": a short human duration.
std::string FormatDuration(std::chrono::nanoseconds d);

}  // namespace flashroll
