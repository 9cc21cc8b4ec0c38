// Counters and the exec latency histogram of the node agent, rendered in
// the Prometheus text exposition format for GET /metrics.
//
// Thread safety: Record* may be called from any thread at once (atomics);
// Render reads a consistent-enough snapshot (each value atomically).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "sandbox/reaper.h"

namespace flashroll::sandbox::api {

enum class ApiOp { kCreate, kExec, kFiles, kFreeze, kThaw, kDestroy, kEvents, kSignal };

class ApiMetrics {
 public:
  // Upper bounds of the exec latency buckets, in seconds.
  static constexpr std::array<double, 14> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,    0.25,  0.5,    1,     2.5,  5,    10};

  void RecordCreate() { creates_++; }
  void RecordDestroy() { destroys_++; }
  // An exec that ran (whatever its exit code), and how long it took.
  void RecordExec(double seconds);
  // A request on `op` that ended in an error reply.
  void RecordFailure(ApiOp op) { failures_[static_cast<size_t>(op)]++; }

  uint64_t creates() const { return creates_; }
  uint64_t execs() const { return execs_; }
  uint64_t destroys() const { return destroys_; }
  uint64_t failures(ApiOp op) const { return failures_[static_cast<size_t>(op)]; }

  // The exposition text; `live` is the number of sandboxes alive now.
  std::string Render(size_t live) const;

 private:
  std::atomic<uint64_t> creates_{0}, destroys_{0}, execs_{0};
  std::array<std::atomic<uint64_t>, 8> failures_{};  // by ApiOp
  std::array<std::atomic<uint64_t>, kBuckets.size()> buckets_{};  // non-cumulative counts
  std::atomic<uint64_t> exec_micros_{0};                            // sum, in microseconds
};

// The manager's teardown reaper (Manager::teardown_stats) in the same format:
// teardowns pending now, failed attempts, teardowns finished late and
// abandoned ones.
std::string RenderTeardownMetrics(const Reaper::Stats& stats);

}  // namespace flashroll::sandbox::api
