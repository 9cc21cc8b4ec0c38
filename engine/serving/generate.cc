#include "engine/serving/generate.h"

namespace flashroll::engine {

Result<std::vector<int32_t>> Generate(const Model& model, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& options,
                                      const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) return Status::InvalidArgument("the prompt has no tokens");
  if (options.max_tokens < 0) return Status::InvalidArgument("max_tokens must not be negative");
  if (!(options.temperature >= 0)) return Status::InvalidArgument("temperature must not be negative");
  EngineOptions engine_options;
  engine_options.threads = options.threads;
  engine_options.device = options.device;
  engine_options.max_running = 1;
  engine_options.kv_dtype = options.kv_dtype;
  // Room for this one sequence, in whole blocks.
  const KvLayout layout = model.KvLayoutFor(engine_options.block_size, options.kv_dtype);
  const int64_t tokens = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  engine_options.kv_memory_bytes = (tokens / layout.block_size + 1) * layout.BlockBytes();
  if (model.MaxPositions() <= 0) engine_options.max_model_len = tokens;
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, nullptr, engine_options));
  GenerationRequest request;
  request.prompt = prompt;
  request.max_tokens = options.max_tokens;
  request.stop_tokens = options.stop_tokens;
  request.sampling.temperature = options.temperature;
  request.sampling.seed = options.seed;
  FR_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine->Submit(std::move(request)));
  std::vector<int32_t> out;
  while (std::optional<StreamEvent> e = stream->Next()) {
    if (!e->has_token) continue;
    out.push_back(e->token.token);
    if (on_token) on_token(e->token.token);
  }
  return out;
}

}  // namespace flashroll::engine
