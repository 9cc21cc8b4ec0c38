#include "engine/serving/decode_benchmark.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/serving/benchmark_inputs.h"

namespace flashroll::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Result<DecodeBenchmarkResult> RunDecodeBenchmark(const Model& model, const DecodeBenchmarkOptions& o) {
  if (o.batch < 1 || o.context < 1 || o.gen_tokens < 2 || o.prefill_tokens < 1 || o.repeats < 1) {
    return Status::InvalidArgument("batch, context, prefill tokens and repeats must be at least 1, gen tokens at least 2");
  }
  const int64_t vocab = model.config().vocab_size;
  EngineOptions eo;
  eo.threads = o.threads;
  eo.kv_dtype = o.kv_dtype;
  eo.device = o.device;
  eo.prefix_caching = false;
  eo.max_running = o.batch;
  eo.max_batch_tokens = std::max<int64_t>(512, o.batch);
  const KvLayout layout = model.KvLayoutFor(eo.block_size, eo.kv_dtype);
  const int64_t per_seq = std::max(o.context + o.gen_tokens, o.prefill_tokens + 1) / eo.block_size + 2;
  eo.kv_memory_bytes = o.batch * per_seq * layout.BlockBytes();
  eo.max_model_len = model.MaxPositions() > 0 ? 0 : std::max(o.context + o.gen_tokens, o.prefill_tokens + 1);
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, nullptr, eo));

  std::vector<double> prefill, decode;
  for (int run = 0; run <= o.repeats; ++run) {
    GenerationRequest p;
    p.prompt = PseudoRandomPrompt(o.prefill_tokens, vocab, 1000 + run);
    p.max_tokens = 1;
    p.ignore_eos = true;
    p.sampling.temperature = 0;
    const auto t0 = Clock::now();
    FR_RETURN_IF_ERROR(engine->Generate(p).status());
    const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int64_t b = 0; b < o.batch; ++b) {
      GenerationRequest r;
      r.prompt = PseudoRandomPrompt(o.context, vocab, 7 + run * 1000 + b);
      r.max_tokens = o.gen_tokens;
      r.ignore_eos = true;
      r.sampling.temperature = 0;
      FR_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> s, engine->Submit(std::move(r)));
      streams.push_back(std::move(s));
    }
    // Wait until every sequence has its first token: from then on each step decodes all of them.
    for (auto& s : streams) s->Next();
    const auto t1 = Clock::now();
    int64_t tokens = 0;
    for (auto& s : streams) {
      while (s->Next()) ++tokens;
    }
    const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
    if (run == 0) continue;  // warm-up
    prefill.push_back(static_cast<double>(o.prefill_tokens) / prefill_s);
    decode.push_back(static_cast<double>(tokens) / decode_s);
  }
  return DecodeBenchmarkResult{UpperMedian(decode), UpperMedian(prefill)};
}

}  // namespace flashroll::engine
