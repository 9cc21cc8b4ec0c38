#include "engine/server/server_metrics.h"

#include <cstdio>

namespace flashroll::engine {
namespace {

// Throughput is the change of the token totals over this window.
constexpr std::chrono::seconds kRateWindow{60};

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void Metric(std::string* out, const std::string& name, const char* type, const std::string& help, double value) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + Number(value) + "\n";
}

}  // namespace

ServerMetrics::ServerMetrics() {
  ttft_.bounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
  itl_.bounds = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
                 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5};
  duration_.bounds = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320};
  for (Histogram* h : {&ttft_, &itl_, &duration_}) h->counts.assign(h->bounds.size() + 1, 0);
}

void ServerMetrics::Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

void ServerMetrics::Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le = i < bounds.size() ? Number(bounds[i]) : "+Inf";
    *out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum " + Number(sum) + "\n" + name + "_count " + std::to_string(count) + "\n";
}

void ServerMetrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(seconds);
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(seconds);
}

void ServerMetrics::ObserveRequest(const std::string& endpoint, int http_status, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, http_status}];
  if (http_status < 400) duration_.Observe(seconds);
}

std::string ServerMetrics::Render(const EngineStats& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  samples_.push_back({now, s.prompt_tokens, s.generated_tokens});
  while (samples_.size() > 2 && now - samples_[1].at >= kRateWindow) samples_.pop_front();
  double prompt_rate = 0, generation_rate = 0;
  const Sample& first = samples_.front();
  const double dt = std::chrono::duration<double>(now - first.at).count();
  if (dt > 0) {
    prompt_rate = static_cast<double>(s.prompt_tokens - first.prompt_tokens) / dt;
    generation_rate = static_cast<double>(s.generated_tokens - first.generated_tokens) / dt;
  }

  std::string out;
  Metric(&out, "flashroll_requests_waiting", "gauge", "Requests waiting to be scheduled (queue depth).",
         static_cast<double>(s.waiting));
  Metric(&out, "flashroll_sequences_running", "gauge", "Sequences running in the engine's batch.",
         static_cast<double>(s.running));
  Metric(&out, "flashroll_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         static_cast<double>(s.kv_blocks_total));
  Metric(&out, "flashroll_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
         static_cast<double>(s.kv_blocks_used));
  Metric(&out, "flashroll_kv_blocks_free", "gauge", "KV cache blocks free or cached without a holder.",
         static_cast<double>(s.kv_blocks_total - s.kv_blocks_used));
  Metric(&out, "flashroll_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         static_cast<double>(s.prefix_query_tokens));
  Metric(&out, "flashroll_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         static_cast<double>(s.prefix_hit_tokens));
  Metric(&out, "flashroll_prefix_cache_hit_rate", "gauge", "Prefix cache hits over lookups, in tokens, since start.",
         s.prefix_query_tokens > 0
             ? static_cast<double>(s.prefix_hit_tokens) / static_cast<double>(s.prefix_query_tokens)
             : 0.0);
  Metric(&out, "flashroll_prompt_tokens_total", "counter", "Prompt tokens processed.",
         static_cast<double>(s.prompt_tokens));
  Metric(&out, "flashroll_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(s.generated_tokens));
  Metric(&out, "flashroll_prompt_tokens_per_second", "gauge",
         "Prompt tokens per second, measured between scrapes over the last minute.", prompt_rate);
  Metric(&out, "flashroll_generation_tokens_per_second", "gauge",
         "Generated tokens per second, measured between scrapes over the last minute.", generation_rate);
  Metric(&out, "flashroll_preemptions_total", "counter", "Sequences preempted back to waiting.",
         static_cast<double>(s.preemptions));
  Metric(&out, "flashroll_engine_steps_total", "counter", "Engine steps run.", static_cast<double>(s.steps));
  ttft_.Render("flashroll_time_to_first_token_seconds", "Time from a request's arrival to its first token.", &out);
  itl_.Render("flashroll_inter_token_latency_seconds", "Time between consecutive tokens of one choice.", &out);
  duration_.Render("flashroll_request_duration_seconds", "Time from a request's arrival to its last byte.", &out);
  out += "# HELP flashroll_http_requests_total HTTP requests by endpoint and status.\n"
         "# TYPE flashroll_http_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    out += "flashroll_http_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) +
           "\"} " + std::to_string(count) + "\n";
  }
  return out;
}

}  // namespace flashroll::engine
