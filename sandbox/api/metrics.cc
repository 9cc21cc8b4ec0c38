#include "sandbox/api/metrics.h"

#include <cstdio>

namespace flashroll::sandbox::api {

namespace {

const char* OpName(size_t op) {
  static const char* const kNames[] = {"create", "exec", "files", "freeze", "thaw", "destroy", "events", "signal"};
  return kNames[op];
}

}  // namespace

void ApiMetrics::RecordExec(double seconds) {
  execs_++;
  exec_micros_ += static_cast<uint64_t>(seconds * 1e6);
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      buckets_[i]++;
      return;
    }
  }
}

std::string ApiMetrics::Render(size_t live) const {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof(line), fmt, args...);
    out += line;
  };
  add("# HELP flashroll_sandboxes_live Sandboxes alive now.\n# TYPE flashroll_sandboxes_live gauge\n");
  add("flashroll_sandboxes_live %zu\n", live);
  add("# HELP flashroll_sandbox_creates_total Sandboxes created.\n# TYPE flashroll_sandbox_creates_total counter\n");
  add("flashroll_sandbox_creates_total %llu\n", static_cast<unsigned long long>(creates_.load()));
  add("# HELP flashroll_sandbox_execs_total Commands run.\n# TYPE flashroll_sandbox_execs_total counter\n");
  add("flashroll_sandbox_execs_total %llu\n", static_cast<unsigned long long>(execs_.load()));
  add("# HELP flashroll_sandbox_destroys_total Sandboxes destroyed through the API.\n"
      "# TYPE flashroll_sandbox_destroys_total counter\n");
  add("flashroll_sandbox_destroys_total %llu\n", static_cast<unsigned long long>(destroys_.load()));
  add("# HELP flashroll_sandbox_failures_total Requests answered with an error, by operation.\n"
      "# TYPE flashroll_sandbox_failures_total counter\n");
  for (size_t op = 0; op < failures_.size(); ++op) {
    add("flashroll_sandbox_failures_total{op=\"%s\"} %llu\n", OpName(op),
        static_cast<unsigned long long>(failures_[op].load()));
  }
  add("# HELP flashroll_sandbox_exec_duration_seconds Exec latency inside the agent.\n"
      "# TYPE flashroll_sandbox_exec_duration_seconds histogram\n");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    cumulative += buckets_[i].load();
    add("flashroll_sandbox_exec_duration_seconds_bucket{le=\"%g\"} %llu\n", kBuckets[i],
        static_cast<unsigned long long>(cumulative));
  }
  const uint64_t count = execs_.load();
  add("flashroll_sandbox_exec_duration_seconds_bucket{le=\"+Inf\"} %llu\n", static_cast<unsigned long long>(count));
  add("flashroll_sandbox_exec_duration_seconds_sum %.6f\n", static_cast<double>(exec_micros_.load()) / 1e6);
  add("flashroll_sandbox_exec_duration_seconds_count %llu\n", static_cast<unsigned long long>(count));
  return out;
}

std::string RenderTeardownMetrics(const Reaper::Stats& stats) {
  std::string out;
  out += "# HELP flashroll_sandbox_teardowns_pending Sandbox teardowns that failed and are being retried.\n"
         "# TYPE flashroll_sandbox_teardowns_pending gauge\n";
  out += "flashroll_sandbox_teardowns_pending " + std::to_string(stats.pending) + "\n";
  out += "# HELP flashroll_sandbox_teardown_failures_total Teardown attempts that failed.\n"
         "# TYPE flashroll_sandbox_teardown_failures_total counter\n";
  out += "flashroll_sandbox_teardown_failures_total " + std::to_string(stats.failed_attempts) + "\n";
  out += "# HELP flashroll_sandbox_teardowns_retried_total Teardowns the reaper finished.\n"
         "# TYPE flashroll_sandbox_teardowns_retried_total counter\n";
  out += "flashroll_sandbox_teardowns_retried_total " + std::to_string(stats.finished) + "\n";
  out += "# HELP flashroll_sandbox_teardowns_abandoned_total Teardowns given up at shutdown (left to the next "
         "manager's reclaim).\n# TYPE flashroll_sandbox_teardowns_abandoned_total counter\n";
  out += "flashroll_sandbox_teardowns_abandoned_total " + std::to_string(stats.abandoned) + "\n";
  return out;
}

}  // namespace flashroll::sandbox::api
