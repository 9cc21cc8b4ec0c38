#include "common/progress.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace flashroll {
namespace {

constexpr int kBarWidth = 30;

std::string FormatRate(double per_second, const std::string& unit) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), per_second >= 100 ? "%.0f %s/s" : "%.1f %s/s", per_second,
                unit.c_str());
  return buf;
}

}  // namespace

std::string FormatDuration(std::chrono::nanoseconds d) {
  double seconds = std::chrono::duration<double>(d).count();
  if (seconds < 0) seconds = 0;
  char buf[32];
  if (seconds < 10) {
    std::snprintf(buf, sizeof(buf), "%.1fs", seconds);
    return buf;
  }
  long long s = static_cast<long long>(seconds);
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

Progress::Progress(std::string label, uint64_t total, ProgressOptions options)
    : label_(std::move(label)), total_(total), options_(std::move(options)) {
  out_ = options_.out != nullptr ? options_.out : &std::cerr;
  switch (options_.mode) {
    case ProgressOptions::Mode::kTty:
      tty_ = true;
      break;
    case ProgressOptions::Mode::kPlain:
      tty_ = false;
      break;
    case ProgressOptions::Mode::kAuto:
      tty_ = out_ == &std::cerr && ::isatty(STDERR_FILENO) == 1;
      break;
  }
  start_ = Now();
  interval_ = tty_ ? options_.tty_interval : options_.plain_interval;
  // A terminal shows the bar at once; a log gets its first line only after
  // one interval, so short jobs print just the final line.
  next_draw_ns_.store(tty_ ? 0 : interval_.count(), std::memory_order_relaxed);
}

Progress::~Progress() { Finish(); }

std::chrono::steady_clock::time_point Progress::Now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

void Progress::Advance(uint64_t n) {
  count_.fetch_add(n, std::memory_order_relaxed);
  auto now = Now();
  int64_t since_start = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count();
  if (since_start < next_draw_ns_.load(std::memory_order_relaxed)) return;

  std::lock_guard<std::mutex> lock(mu_);
  // Another thread may have drawn while this one waited for the lock.
  if (finished_ || since_start < next_draw_ns_.load(std::memory_order_relaxed)) return;
  Draw(count_.load(std::memory_order_relaxed), now);
  next_draw_ns_.store(since_start + interval_.count(), std::memory_order_relaxed);
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  auto now = Now();
  uint64_t count = count_.load(std::memory_order_relaxed);
  auto elapsed = now - start_;
  double seconds = std::chrono::duration<double>(elapsed).count();

  std::string line = label_ + ": finished " + std::to_string(count);
  if (total_ > 0) line += "/" + std::to_string(total_);
  line += " " + options_.unit + " in " + FormatDuration(elapsed);
  if (seconds > 0) {
    line += " (" + FormatRate(static_cast<double>(count) / seconds, options_.unit) + ")";
  }
  if (tty_) {
    *out_ << '\r' << line << "\x1b[K\n";
  } else {
    *out_ << line << '\n';
  }
  out_->flush();
}

std::string Progress::FormatLine(uint64_t count, std::chrono::steady_clock::time_point now) const {
  double seconds = std::chrono::duration<double>(now - start_).count();
  double rate = seconds > 0 ? static_cast<double>(count) / seconds : 0;
  std::string counts = std::to_string(count);
  if (total_ > 0) counts += "/" + std::to_string(total_);
  counts += " " + options_.unit;

  std::string percent;
  std::string eta;
  if (total_ > 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%%",
                  100.0 * static_cast<double>(count) / static_cast<double>(total_));
    percent = buf;
    if (rate > 0 && count < total_) {
      std::chrono::duration<double> remaining(static_cast<double>(total_ - count) / rate);
      eta = "ETA " +
            FormatDuration(std::chrono::duration_cast<std::chrono::nanoseconds>(remaining));
    }
  }
  std::string rate_text = rate > 0 ? FormatRate(rate, options_.unit) : "";

  if (tty_) {
    std::string line = label_;
    if (total_ > 0) {
      uint64_t filled = count >= total_ ? kBarWidth : count * kBarWidth / total_;
      line += " [" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "]";
    }
    line += " " + counts;
    if (!percent.empty()) line += " " + percent;
    if (!rate_text.empty()) line += " " + rate_text;
    if (!eta.empty()) line += " " + eta;
    return line;
  }
  std::string line = label_ + ": " + counts;
  if (!percent.empty()) line += " (" + percent + ")";
  if (!rate_text.empty()) line += ", " + rate_text;
  if (!eta.empty()) line += ", " + eta;
  return line;
}

void Progress::Draw(uint64_t count, std::chrono::steady_clock::time_point now) {
  if (tty_) {
    // "\x1b[K" clears what a longer previous line left behind.
    *out_ << '\r' << FormatLine(count, now) << "\x1b[K";
  } else {
    *out_ << FormatLine(count, now) << '\n';
  }
  out_->flush();
}

}  // namespace flashroll
