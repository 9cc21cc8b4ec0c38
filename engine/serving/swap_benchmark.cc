#include "engine/serving/swap_benchmark.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

namespace flashroll::engine {
namespace {

using Clock = std::chrono::steady_clock;

// One wake of the reader: the time, and the tokens of each version read then.
struct Wake {
  Clock::time_point time;
  int64_t version = 0;  // of the first request's token
  int64_t tokens = 0;   // over all requests
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Tokens per second over the wakes in (from, to].
double Rate(const std::vector<Wake>& wakes, Clock::time_point from, Clock::time_point to) {
  int64_t tokens = 0;
  for (const Wake& w : wakes) {
    if (w.time > from && w.time <= to) tokens += w.tokens;
  }
  const double seconds = std::chrono::duration<double>(to - from).count();
  return seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
}

}  // namespace

Result<SwapBenchmarkResult> RunSwapBenchmark(const Model& model, std::unique_ptr<Model> next,
                                             const SwapBenchmarkOptions& o) {
  if (o.sequences < 1 || o.context < 1 || o.warmup_steps < 2 || o.steps_before < 1 || o.steps_after < 1) {
    return Status::InvalidArgument(
        "sequences, context, steps before and after must be at least 1, warm-up steps at least 2");
  }
  if (next == nullptr) return Status::InvalidArgument("no model to swap in");
  // As BuildCheckpoint does in a real swap, before the clock starts.
  next->files().Prefault();
  const int64_t swap_at = o.warmup_steps + o.steps_before;  // tokens of the first request
  // Room for the steps that run while the swap waits for its turn, and for
  // later requests, which start a few steps late (prompts prefill in
  // chunks); the requests are cancelled once the run has what it needs.
  const int64_t max_tokens = 4 * (swap_at + o.steps_after);
  EngineOptions eo;
  eo.threads = o.threads;
  eo.kv_dtype = o.kv_dtype;
  eo.prefix_caching = false;
  eo.max_running = o.sequences;
  eo.max_batch_tokens = std::max<int64_t>(512, o.sequences);
  const KvLayout layout = model.KvLayoutFor(eo.block_size, eo.kv_dtype);
  eo.kv_memory_bytes = o.sequences * ((o.context + max_tokens) / eo.block_size + 2) * layout.BlockBytes();
  eo.max_model_len = model.MaxPositions() > 0 ? 0 : o.context + max_tokens;
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, nullptr, eo));
  const int64_t old_version = engine->weight_version();

  std::vector<std::shared_ptr<RequestStream>> streams;
  const uint64_t vocab = static_cast<uint64_t>(model.config().vocab_size);
  for (int64_t s = 0; s < o.sequences; ++s) {
    GenerationRequest r;
    uint64_t x = static_cast<uint64_t>(s + 1) * 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < o.context; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      r.prompt.push_back(static_cast<int32_t>(x % vocab));
    }
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    FR_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine->Submit(std::move(r)));
    streams.push_back(std::move(stream));
  }

  std::vector<Wake> wakes;
  std::optional<Clock::time_point> before_from, call_start, call_end;
  Status swapped = Status::Ok();
  std::thread swapper;
  int64_t first_tokens = 0, new_tokens = 0;
  while (new_tokens < o.steps_after) {
    std::optional<StreamEvent> event = streams[0]->Next();
    if (!event) break;
    if (!event->has_token) continue;
    ++first_tokens;
    if (event->version != old_version) ++new_tokens;
    Wake wake{Clock::now(), event->version, 1};
    for (size_t s = 1; s < streams.size(); ++s) {
      bool timed_out = false;
      while (std::optional<StreamEvent> other = streams[s]->Next(std::chrono::milliseconds(0), &timed_out)) {
        if (other->has_token) ++wake.tokens;
      }
    }
    wakes.push_back(wake);
    if (first_tokens == o.warmup_steps) before_from = wake.time;
    if (first_tokens == swap_at) {
      // From another thread: SwapWeights blocks until the loop has run it,
      // and the tokens around it must be read as they come.
      call_start = Clock::now();
      swapper = std::thread([&] {
        swapped = engine->SwapWeights(std::move(next), old_version + 1);
        call_end = Clock::now();
      });
    }
  }
  if (swapper.joinable()) swapper.join();
  FR_RETURN_IF_ERROR(swapped);
  if (new_tokens < o.steps_after) {
    return Status::Internal("bench swap: the first request ended after " + std::to_string(first_tokens) +
                            " tokens, " + std::to_string(new_tokens) + " of them on the new weights (of " +
                            std::to_string(o.steps_after) + " wanted)");
  }

  std::optional<Clock::time_point> last_old, first_new;
  std::vector<double> steps;
  for (size_t i = 0; i < wakes.size(); ++i) {
    if (wakes[i].version == old_version) last_old = wakes[i].time;
    if (wakes[i].version > old_version && !first_new) first_new = wakes[i].time;
    if (i > 0 && wakes[i].time > *before_from && wakes[i].time <= *call_start) {
      steps.push_back(Ms(wakes[i].time - wakes[i - 1].time));
    }
  }
  if (!last_old || !first_new || steps.empty()) return Status::Internal("bench swap: no step before the swap was timed");
  std::sort(steps.begin(), steps.end());
  SwapBenchmarkResult r;
  r.sequences = o.sequences;
  r.gap_ms = Ms(*first_new - *last_old);
  r.step_ms = steps[steps.size() / 2];
  r.swap_pause_ms = std::max(0.0, r.gap_ms - r.step_ms);
  r.swap_call_ms = Ms(*call_end - *call_start);
  r.tokens_per_s_before = Rate(wakes, *before_from, *call_start);
  r.tokens_per_s_during = Rate(wakes, *call_start, *first_new);
  r.tokens_per_s_after = Rate(wakes, *first_new, wakes.back().time);
  return r;
}

}  // namespace flashroll::engine
