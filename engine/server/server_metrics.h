// ServerMetrics: what GET /metrics reports, in Prometheus' text format.
//
// Gauges and counters read from Engine::Stats() at scrape time (queue depth,
// running sequences, KV blocks, prefix-cache hits, token totals), token
// throughput over the last minute, and what the server itself observes:
// requests by endpoint and status, time to first token and inter-token
// latency histograms (each token of each choice after its first), and the
// whole request's duration.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/serving/engine.h"

namespace flashroll::engine {

class ServerMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  ServerMetrics();

  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveRequest(const std::string& endpoint, int http_status, double seconds);

  // The exposition text; `stats` is the engine's state now.
  std::string Render(const EngineStats& stats);

 private:
  struct Histogram {
    std::vector<double> bounds;    // upper bounds, ascending (+Inf implied)
    std::vector<uint64_t> counts;  // per bucket, not cumulative; the last is +Inf
    double sum = 0;
    uint64_t count = 0;
    void Observe(double v);
    void Render(const std::string& name, const std::string& help, std::string* out) const;
  };
  struct Sample {
    Clock::time_point at;
    int64_t prompt_tokens, generated_tokens;
  };

  std::mutex mu_;
  Histogram ttft_;                                       // guarded by mu_
  Histogram itl_;                                        // guarded by mu_
  Histogram duration_;                                   // guarded by mu_
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mu_
  std::deque<Sample> samples_;                           // guarded by mu_; for the throughput
};

}  // namespace flashroll::engine
