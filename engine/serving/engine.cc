#include "engine/serving/engine.h"

#include <sys/stat.h>

#include <algorithm>
#include <future>
#include <thread>

#include "engine/device/device_memory.h"
#include "engine/kernels/cpu_threads.h"
#include "engine/serving/engine_state.h"

namespace flashroll::engine {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "none";
}

// ---- RequestStream -------------------------------------------------------

RequestStream::~RequestStream() { Cancel(); }

void RequestStream::Push(StreamEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (event.finish != FinishReason::kNone) ++finished_;
  events_.push_back(std::move(event));
  cv_.notify_all();
}

std::optional<StreamEvent> RequestStream::Next(std::optional<std::chrono::milliseconds> timeout, bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timed_out) *timed_out = false;
  auto ready = [&] { return !events_.empty() || finished_ == n_ || cancelled_; };
  if (timeout) {
    if (!cv_.wait_for(lock, *timeout, ready)) {
      if (timed_out) *timed_out = true;
      return std::nullopt;
    }
  } else {
    cv_.wait(lock, ready);
  }
  if (events_.empty()) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::vector<Choice> RequestStream::Collect() {
  std::vector<Choice> choices(static_cast<size_t>(n_));
  while (std::optional<StreamEvent> e = Next()) {
    Choice& c = choices[e->choice];
    if (e->has_token) {
      c.tokens.push_back(e->token.token);
      c.versions.push_back(e->version);
      if (!e->routing.empty()) c.routing.push_back(std::move(e->routing));
      if (!e->prompt_routing.empty()) c.prompt_routing = std::move(e->prompt_routing);
      c.samples.push_back(std::move(e->token));
    }
    if (e->finish != FinishReason::kNone) {
      c.finish = e->finish;
      c.stop_string = e->stop_string;
      c.error = e->error;
      c.prefill_tokens = e->prefill_tokens;
      c.reprefill_tokens = e->reprefill_tokens;
    }
  }
  return choices;
}

void RequestStream::Cancel() {
  Engine* engine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || finished_ == n_) return;
    cancelled_ = true;
    engine = engine_;
  }
  if (engine) engine->Cancel(id_);
}

// ---- Engine --------------------------------------------------------------

Result<std::unique_ptr<Engine>> Engine::Start(const Model& model, const Tokenizer* tokenizer,
                                              const EngineOptions& options) {
  const ModelConfig& c = model.config();
  if (options.block_size < 1 || options.block_size > 256 || kernels::kSplitKeys % options.block_size != 0) {
    return Status::InvalidArgument("block_size must divide " + std::to_string(kernels::kSplitKeys) + ", got " +
                                   std::to_string(options.block_size));
  }
  if (options.max_running < 1) return Status::InvalidArgument("max_running must be at least 1");
  if (options.max_batch_tokens < 1) return Status::InvalidArgument("max_batch_tokens must be at least 1");
  if (options.reprefill_older_than < -1) {
    return Status::InvalidArgument("reprefill_older_than: must be -1 (off) or at least 0, got " +
                                   std::to_string(options.reprefill_older_than));
  }
  struct stat dir;
  if (!options.persist_dir.empty() && (::stat(options.persist_dir.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode))) {
    return Status::InvalidArgument("persist_dir: " + options.persist_dir + " is not a directory");
  }
  std::unique_ptr<Engine> engine(new Engine());
  engine->state_ = std::make_unique<State>();
  State& s = *engine->state_;
  s.model = &model;
  s.started = &model;
  s.current = std::shared_ptr<const Model>(&model, [](const Model*) {});  // the caller's
  s.weight_bytes = model.WeightBytes();
  s.tokenizer = tokenizer;
  s.options = options;
  s.vocab = c.vocab_size;
  s.max_model_len = options.max_model_len > 0 ? options.max_model_len : model.MaxPositions();
  if (model.MaxPositions() > 0 && s.max_model_len > model.MaxPositions()) {
    return Status::InvalidArgument("max_model_len " + std::to_string(s.max_model_len) +
                                   " exceeds the model's max_position_embeddings " +
                                   std::to_string(model.MaxPositions()));
  }
  if (s.max_model_len <= 0) {
    return Status::InvalidArgument("the model's config has no max_position_embeddings: set max_model_len");
  }
  const KvLayout layout = model.KvLayoutFor(options.block_size, options.kv_dtype);
  const int64_t num_blocks = options.kv_memory_bytes / layout.BlockBytes();
  if (num_blocks < 1) {
    return Status::InvalidArgument("kv_memory " + std::to_string(options.kv_memory_bytes) +
                                   " bytes holds no KV block of " + std::to_string(layout.BlockBytes()) + " bytes");
  }
  kernels::SetThreads(options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  FR_RETURN_IF_ERROR(CheckDevice(options.device, DeviceWeightBytes(options.device, model.files()) + num_blocks * layout.BlockBytes()));
  FR_ASSIGN_OR_RETURN(s.backend, NewBackend(model, options.device));
  FR_RETURN_IF_ERROR(s.backend->AllocateKv(layout, num_blocks));
  s.kv_layout = layout;
  s.routing = model.routing_shape();
  s.blocks = std::make_unique<BlockManager>(num_blocks, options.block_size, options.prefix_caching);
  StepOptions step;
  step.max_running = options.max_running;
  step.max_batch_tokens = options.max_batch_tokens;
  step.routing_token_bytes = s.routing.TokenBytes();
  // The prefix-cache salt: blocks written by another model, KV dtype or (to
  // come) weight version never match.
  s.base_salt = BlockManager::ChainHash(static_cast<uint64_t>(options.kv_dtype == KvDType::kF32 ? 1 : 2),
                                       std::span<const int32_t>(), reinterpret_cast<uintptr_t>(&model));
  s.version = options.weight_version;
  step.salt = BlockManager::ChainHash(s.base_salt, std::span<const int32_t>(),
                                      static_cast<uint64_t>(options.weight_version));
  s.scheduler = std::make_unique<StepScheduler>(s.blocks.get(), s.backend.get(), step);
  s.scheduler->set_reclaim([&s] { return s.ReclaimParked(); });
  s.scheduler->set_version(options.weight_version);
  s.sampler = std::make_unique<Sampler>(c.vocab_size);
  s.stats.kv_blocks_total = num_blocks;
  s.loop = std::thread([&s] { s.Loop(); });
  return engine;
}

Engine::~Engine() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->loop.joinable()) state_->loop.join();
}

Result<std::shared_ptr<RequestStream>> Engine::Submit(GenerationRequest request) {
  State& s = *state_;
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0) return Status::InvalidArgument("prompt: must hold at least one token");
  for (int64_t i = 0; i < prompt; ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= s.vocab) {
      return Status::InvalidArgument("prompt: token " + std::to_string(request.prompt[i]) + " at position " +
                                     std::to_string(i) + " is outside the vocabulary of " + std::to_string(s.vocab));
    }
  }
  if (request.n < 1) return Status::InvalidArgument("n: must be at least 1, got " + std::to_string(request.n));
  if (request.max_tokens < 0) {
    return Status::InvalidArgument("max_tokens: must not be negative, got " + std::to_string(request.max_tokens));
  }
  FR_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  if (!request.stop_strings.empty() && s.tokenizer == nullptr) {
    return Status::InvalidArgument("stop: stop strings need the model's tokenizer");
  }
  for (const std::string& stop : request.stop_strings) {
    if (stop.empty()) return Status::InvalidArgument("stop: a stop string is empty");
  }
  if (request.pin_version && s.options.weight_memory_bytes > 0 && s.options.weight_memory_bytes < 2 * s.weight_bytes) {
    return Status::InvalidArgument("pin_version: two resident weight versions need " +
                                   std::to_string(2 * s.weight_bytes) + " bytes; the engine's weight memory is " +
                                   std::to_string(s.options.weight_memory_bytes));
  }
  if ((request.return_routing || request.return_prompt_routing) && s.routing.empty()) {
    return Status::InvalidArgument(std::string(request.return_routing ? "return_routing" : "return_prompt_routing") +
                                   ": the model has no MoE layers, so no routing");
  }
  const int64_t scored = static_cast<int64_t>(request.score_tokens.size());
  if (scored > 0) {
    if (request.n != 1) return Status::InvalidArgument("n: scoring takes n = 1");
    if (request.max_tokens != 0) return Status::InvalidArgument("max_tokens: scoring generates nothing (0)");
    for (int64_t i = 0; i < scored; ++i) {
      if (request.score_tokens[i] < 0 || request.score_tokens[i] >= s.vocab) {
        return Status::InvalidArgument("token_ids: token " + std::to_string(request.score_tokens[i]) +
                                       " at position " + std::to_string(i) + " is outside the vocabulary of " +
                                       std::to_string(s.vocab));
      }
    }
  }
  if (!request.score_routing.empty()) {
    const int64_t per_token = s.routing.TokenIds();
    if (per_token == 0) return Status::InvalidArgument("routing: the model has no MoE layers, so nothing to replay");
    const int64_t given = static_cast<int64_t>(request.score_routing.size());
    const int64_t all = prompt + scored;
    if (scored == 0 || given % per_token != 0 || (given / per_token != all && given / per_token != all - 1)) {
      return Status::InvalidArgument("routing: " + std::to_string(given) + " expert ids, not " +
                                     std::to_string(per_token) + " (" + std::to_string(s.routing.moe_layers) +
                                     " MoE layers x " + std::to_string(s.routing.k) + ") for each of the " +
                                     std::to_string(all) + " prompt and scored tokens (or all but the last)");
    }
    for (int64_t t = 0; t < given / per_token; ++t) {
      for (int64_t l = 0; l < s.routing.moe_layers; ++l) {
        const int32_t* ids = &request.score_routing[t * per_token + l * s.routing.k];
        for (int64_t j = 0; j < s.routing.k; ++j) {
          const bool outside = ids[j] < 0 || ids[j] >= s.routing.num_experts;
          if (!outside && std::find(ids, ids + j, ids[j]) == ids + j) continue;
          const std::string where =
              "routing[" + std::to_string(t) + "][" + std::to_string(l) + "]: expert " + std::to_string(ids[j]);
          if (outside) {
            return Status::InvalidArgument(where + " out of range [0, " + std::to_string(s.routing.num_experts) + ")");
          }
          return Status::InvalidArgument(where + " repeated");
        }
      }
    }
  }
  // Scored tokens take the room generated ones would.
  const int64_t extra = scored > 0 ? scored : request.max_tokens;
  const std::string asked = "prompt of " + std::to_string(prompt) + " tokens + " +
                            (scored > 0 ? "token_ids " : "max_tokens ") + std::to_string(extra);
  if (prompt + extra > s.max_model_len) {
    return Status::InvalidArgument(asked + " exceeds the context of " + std::to_string(s.max_model_len) + " tokens");
  }
  const int64_t pool_tokens = s.blocks->num_blocks() * s.options.block_size;
  if (prompt + extra > pool_tokens) {
    return Status::InvalidArgument(asked + " exceeds the KV cache of " + std::to_string(pool_tokens) + " tokens");
  }
  auto req = std::make_unique<Request>();
  req->params = std::move(request);
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    req->id = s.next_id++;
    stream.reset(new RequestStream(this, req->id, req->params.n));
    req->stream = stream;
    s.inbox.push_back(std::move(req));
  }
  s.cv.notify_all();
  return stream;
}

Result<std::vector<Choice>> Engine::Generate(GenerationRequest request) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, Submit(std::move(request)));
  return stream->Collect();
}

void Engine::Cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancels.push_back(id);
  }
  state_->cv.notify_all();
}

Status Engine::RunOnLoop(std::function<Status()> fn) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->tasks.push_back([fn = std::move(fn), done] { done->set_value(fn()); });
  }
  state_->cv.notify_all();
  return result.get();
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

int64_t Engine::max_model_len() const { return state_->max_model_len; }
const Model& Engine::model() const { return *state_->started; }

}  // namespace flashroll::engine
