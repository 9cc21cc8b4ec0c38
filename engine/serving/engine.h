// Engine: the serving core. One loop thread owns the model and runs steps;
// each step is one flattened batch of many sequences (chunked prefill mixed
// with decode) over a paged KV cache with prefix caching (step_scheduler.h,
// block_manager.h, backend.h). Callers on any thread submit requests and
// read their tokens from a RequestStream.
//
// A request with n > 1 choices prefills its prompt once and forks the n
// sequences from it: they share the prompt's KV blocks (copy-on-write).
// Choice c's token t is drawn with UniformDouble(seed, c, t) (sampler.h), so
// a seeded request gives the same tokens and bitwise-identical logprobs
// alone or in any batch, with any thread count, in prefill or in decode.
//
// When KV memory runs short the youngest running sequence is preempted back
// to waiting and later recomputed (its tokens so far are kept); the engine
// never runs out of memory. A request that can never fit (prompt + max
// tokens beyond the context, or beyond the whole KV pool) is refused at
// Submit with an error naming the limit.
//
// MoE routing (routing.h): every token a sequence computes keeps the experts
// it used, recorded once, when first computed; a token computed again (after
// preemption, a pause to disk without room to restore, or a weight swap's
// recompute) replays its recorded experts instead of routing afresh, unless
// reprefill_older_than marks its block stale (see there). So a
// sequence that spans a weight swap keeps the routing of the tokens computed
// before it (spliced routing: old tokens as recorded, new ones routed by the
// new weights). Sequences whose KV or routing did not all come from the
// current weights' own router (they span a swap, or score with given
// routing) make no new blocks known to the prefix cache.
//
// A finished, cancelled or abandoned (RequestStream destroyed) choice frees
// its KV blocks and deletes its sequence file, if paused to disk, at the next
// step boundary.
//
// Thread safety: all public methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/device/device.h"
#include "engine/models/model.h"
#include "engine/models/paged_kv_storage.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

struct EngineOptions {
  // Where the model runs (device.h): the CPU, or a CUDA GPU, checked
  // (CheckDevice: weights + kv_memory_bytes) before the weights are copied.
  DeviceSpec device;
  int threads = 0;                  // kernel threads; 0 = all cores
  int64_t max_running = 64;         // sequences decoding at once
  int64_t max_batch_tokens = 512;   // tokens in one step (prefill chunks + decodes)
  int64_t kv_memory_bytes = 1ll << 30;
  int64_t block_size = 16;          // tokens per KV block
  KvDType kv_dtype = KvDType::kBF16;
  int64_t max_model_len = 0;        // 0 = the model's max_position_embeddings
  bool prefix_caching = true;
  int64_t weight_version = 0;       // the version of the starting weights
  // An existing directory, used by this engine alone, where sequences paused
  // to disk are kept (sequence_file.h); empty: pausing to disk is refused.
  std::string persist_dir;
  // Partial re-prefill, k >= 0 (-1: off, stale KV is kept): after a swap to
  // weight version V, the KV blocks a sequence holds that contain KV written
  // by a version older than V - k are computed again under the new weights
  // (a chunked prefill over those positions only: from the first such block
  // to the end of the last, usually a prefix) before it decodes further; a
  // sequence paused to disk is checked when it is read back. The recomputed
  // tokens route afresh (MoE) and their recorded routing is replaced, so the
  // routing always describes the KV the sequence attends to; so do the stale
  // tokens of a sequence computed again from scratch before its re-prefill
  // was done (preempted, its blocks given back, read back without room).
  // Decoding waits: a sequence decodes nothing while its re-prefill is
  // pending, so no token it samples attends to stale KV. With k = 0 the
  // continuation is bitwise what a fresh prefill under the new weights
  // gives. EngineStats::reprefill_tokens counts the recomputed tokens.
  int64_t reprefill_older_than = -1;
  // Memory for resident weights. Requests that pin their version
  // (GenerationRequest::pin_version) need room for two versions, twice
  // Model::WeightBytes(); below that they are refused at Submit. 0: room
  // for two.
  int64_t weight_memory_bytes = 0;
};

struct PauseOptions {
  // Also write the sequence's KV to a file in persist_dir and release its
  // blocks; Resume reads it back.
  bool to_disk = false;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;     // token ids, at least one
  SamplingParams sampling;         // temperature 0 = greedy
  int64_t max_tokens = 16;         // per choice
  int32_t n = 1;                   // choices
  std::vector<int32_t> stop_tokens;      // end a choice (the token is kept), besides EOS
  std::vector<std::string> stop_strings;  // end a choice when its text contains one (text up to it kept)
  bool ignore_eos = false;
  // Scoring instead of generating: each of these tokens, following the
  // prompt, comes back as one event whose SampledToken holds its raw logprob
  // (and top_logprobs alternatives) — bitwise what generation recorded for it
  // at this temperature. Needs n = 1 and max_tokens = 0.
  std::vector<int32_t> score_tokens;
  bool score_full_vocab = false;  // also the whole raw log-softmax per scored token
  // Scoring on a MoE model with the experts a sample used (routing replay,
  // R3): [token][moe_layer][k] ids, flat, for the prompt and score_tokens —
  // every one of them, or all but the last (whose experts change no
  // logprob; it then routes afresh), as return_prompt_routing and
  // return_routing give them. Each token is run through exactly these
  // experts (model.h), so scoring a sample with its recorded routing gives
  // bitwise the logprobs generation recorded. InvalidArgument naming
  // "routing" for another length or a dense model, and
  // "routing[t][l]: expert E out of range [0, N)" or "... repeated".
  std::vector<int32_t> score_routing;
  // MoE models (routing.h); InvalidArgument "return_routing: ..." on a
  // dense model. Each generated token's StreamEvent::routing holds the
  // experts of the forward pass whose logits it was sampled from (the
  // routing of the token before it), so that with return_prompt_routing
  // (prompt_routing on each choice's first token event: the prompt's tokens
  // but its last) the two together give the routing of every token the
  // model computed, in order — what score_routing takes back.
  bool return_routing = false;
  bool return_prompt_routing = false;
  // Finish on the weight version the request was admitted under: a swap
  // moves every other sequence to the new weights and keeps the old ones
  // resident for this request's choices until they end (their tokens and
  // KV blocks record the old version). InvalidArgument "pin_version: ..."
  // at Submit when EngineOptions::weight_memory_bytes has no room for two
  // versions.
  bool pin_version = false;
  // The first prompt positions that earlier requests of the same episode
  // computed (a client that sends each turn as a new request with the whole
  // conversation): computing them again counts in
  // EngineStats::reprefill_tokens. Sessions need no hint.
  int64_t computed_before = 0;
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "abort"

// One event of a request's stream: a token of one choice, or the end of a
// choice. Tokens of one choice arrive in order; choices interleave.
struct StreamEvent {
  int32_t choice = 0;
  uint64_t sequence_id = 0;                  // the choice's sequence (Pause/Resume); 0 before it exists
  bool has_token = false;
  SampledToken token;                        // when has_token
  FinishReason finish = FinishReason::kNone;  // set on the choice's last event
  std::string stop_string;                   // the stop string that matched, if any
  std::vector<float> vocab_logprobs;         // scoring with score_full_vocab: [vocab]
  std::vector<int32_t> routing;              // return_routing: [moe_layer][k] expert ids
  std::vector<std::vector<int32_t>> prompt_routing;  // return_prompt_routing: [token][moe_layer * k]
  int64_t version = 0;                       // the weight version that produced the token
  std::string error;                         // with kAbort, why the choice failed, when it did
  // On a choice's last event: what its sequence computed in prefill passes
  // and of that recomputed, since it began (a session: since it opened).
  int64_t prefill_tokens = 0, reprefill_tokens = 0;
};

// The tokens and logprobs of one finished choice.
struct Choice {
  std::vector<int32_t> tokens;
  std::vector<SampledToken> samples;  // one per token
  std::vector<int64_t> versions;      // the weight version of each token
  std::vector<std::vector<int32_t>> routing;         // return_routing: [token][moe_layer * k]
  std::vector<std::vector<int32_t>> prompt_routing;  // return_prompt_routing: [prompt token][moe_layer * k]
  FinishReason finish = FinishReason::kNone;
  std::string stop_string;
  std::string error;  // StreamEvent::error of the last event
  int64_t prefill_tokens = 0, reprefill_tokens = 0;  // those of the last event
};

// Where one sequence stands (Engine::GetSequence).
struct SequenceInfo {
  uint64_t id = 0;
  std::string state;  // "waiting", "running", "paused"
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t kv_blocks = 0;
  bool on_disk = false;  // paused to disk: its KV is in a sequence file
  int64_t tokens = 0;    // prompt + generated; a session's whole conversation
  // What this sequence computed in prefill passes and, of that, recomputed
  // (EngineStats::prefill_tokens, reprefill_tokens).
  int64_t prefill_tokens = 0, reprefill_tokens = 0;
};

struct EngineStats {
  int64_t waiting = 0, running = 0, paused = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // totals since start
  int64_t preemptions = 0, steps = 0;
  // Tokens computed in prefill passes (every position but a decode's; prefix
  // cache hits are not computed), and of those the positions whose KV the
  // same sequence (or session, or GenerationRequest::computed_before) had
  // computed before: recomputed after a preemption, a restore without room,
  // a partial re-prefill (reprefill_older_than) or a released session.
  int64_t prefill_tokens = 0;
  int64_t reprefill_tokens = 0;
  int64_t resident_weight_versions = 1;  // the current one, and an older one while pinned sequences use it
};

class Engine;

// The consumer side of one request. Destroying it (or Cancel) aborts the
// request and frees its sequences and KV blocks at the next step.
class RequestStream {
 public:
  ~RequestStream();
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // Blocks for the next event; std::nullopt once every choice has finished
  // (or on timeout, with *timed_out set when given).
  std::optional<StreamEvent> Next(std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                                  bool* timed_out = nullptr);
  // Reads events until the end and returns the n choices.
  std::vector<Choice> Collect();
  void Cancel();
  int32_t n() const { return n_; }

 private:
  friend class Engine;
  RequestStream(Engine* engine, uint64_t id, int32_t n) : engine_(engine), id_(id), n_(n) {}
  void Push(StreamEvent event);

  Engine* engine_;
  uint64_t id_;
  int32_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  int32_t finished_ = 0;
  bool cancelled_ = false;
};

class Engine {
 public:
  // Starts the loop thread over `model` (which must outlive the engine).
  // `tokenizer` may be null: stop strings are then refused.
  static Result<std::unique_ptr<Engine>> Start(const Model& model, const Tokenizer* tokenizer,
                                               const EngineOptions& options);
  ~Engine();  // aborts what is in flight and joins the loop thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. InvalidArgument naming the field: an empty prompt, a
  // token outside the vocabulary (with its position), n < 1, negative
  // max_tokens, bad sampling parameters, prompt + max_tokens beyond
  // max_model_len or beyond the KV pool ("... exceeds the context of N tokens").
  Result<std::shared_ptr<RequestStream>> Submit(GenerationRequest request);

  // Submit + Collect.
  Result<std::vector<Choice>> Generate(GenerationRequest request);

  // Pauses a sequence at the next token boundary: it leaves the batch but
  // keeps its KV blocks, tokens and logprobs; the sampler's position is its
  // token count, so Resume continues exactly as if it had never stopped.
  // NotFound for an unknown or finished sequence; FailedPrecondition when it
  // is already paused (Pause) or not paused (Resume).
  //
  // With to_disk the sequence's KV is written to its sequence file in
  // persist_dir (sequence_file.h; on the loop thread, so other sequences
  // wait for the write) and its blocks are released. FailedPrecondition
  // when persist_dir is empty; the write's error (naming the file) leaves
  // the sequence running. Resume reads the file into fresh blocks and
  // deletes it; with too few free blocks the sequence is recomputed instead,
  // like a preempted one. A file that is damaged, truncated, of another
  // format version, KV layout or sequence fails the sequence rather than
  // resume it: Resume returns the error (kCorruption, naming the file and
  // what is wrong), the choice ends with kAbort and that message in
  // StreamEvent::error, and the file is deleted.
  Status Pause(uint64_t sequence_id, PauseOptions options = {});
  Status Resume(uint64_t sequence_id);
  Result<SequenceInfo> GetSequence(uint64_t sequence_id);

  // Swaps in new weights at the next token boundary: running sequences
  // continue on them without re-prefill (their KV blocks are kept; with
  // EngineOptions::reprefill_older_than, only blocks old enough are
  // recomputed first), and every later token records `version`. Prefix-cache blocks written by
  // older versions are not reused by new requests. InvalidArgument naming
  // the tensor or config field when `model` differs from the running one in
  // architecture, a tensor's name, shape or dtype; FailedPrecondition when
  // version is not above the current one. On error the old weights keep
  // serving.
  //
  // Sequences of requests with pin_version stay on the weights they were
  // admitted under, which stay resident beside the new ones. At most two
  // versions are resident: a swap that would need a third (sequences still
  // pinned to an older version, and others pinned to the current one)
  // waits, and this call with it, until the older version's sequences end
  // (FailedPrecondition when another swap is already waiting, Unavailable
  // when the engine stops first).
  Status SwapWeights(std::unique_ptr<Model> model, int64_t version);

  // Sessions (engine_session.cc): one sequence that lives from an episode's
  // first prompt to its final answer. Between turns it is paused with its
  // KV blocks and routing kept; AppendToSession adds tokens (a tool's
  // output) that the next turn prefills after them, and GenerateInSession
  // runs a turn: a request whose prompt is the session's tokens so far
  // (GenerationRequest::prompt must be empty; n = 1, no scoring, no
  // pin_version). The turn's sampling counts its tokens from the turn's
  // start (its seed and index, like a new request with the whole
  // conversation as prompt), and when it ends (stop, length, Cancel or the
  // stream destroyed) the sequence is parked again with what it sampled.
  // Across a weight swap a session keeps its KV, its tokens recording the
  // version that sampled them, unless reprefill_older_than asks otherwise.
  // While a new request waits for KV blocks, parked sessions give theirs
  // back, the longest-parked first (their full blocks stay in the prefix
  // cache until evicted; what is gone is recomputed at the next turn).
  //
  // NotFound for an unknown or closed session; FailedPrecondition for an
  // append or generate while a turn runs, or after the session failed (its
  // sequence file could not be read back: the message says why);
  // InvalidArgument for tokens outside the vocabulary or beyond the
  // context.
  Result<uint64_t> OpenSession();
  Status AppendToSession(uint64_t session, std::vector<int32_t> tokens);
  Result<std::shared_ptr<RequestStream>> GenerateInSession(uint64_t session, GenerationRequest turn);
  // Between turns only; to_disk writes its KV to a sequence file and
  // releases its blocks (the next turn reads it back).
  Status PauseSession(uint64_t session, PauseOptions options);
  // Ends a session between turns or during one (the turn ends with kAbort);
  // its blocks and file are freed.
  Status CloseSession(uint64_t session);
  // The session's sequence: SequenceInfo, its tokens so far.
  Result<SequenceInfo> GetSession(uint64_t session);
  int64_t weight_version() const;

  EngineStats Stats() const;
  int64_t max_model_len() const;
  // The model the engine started with (the caller's, which outlives it):
  // its config and shapes are every swapped-in version's. Stable across
  // swaps, unlike the weights serving now, which a swap frees.
  const Model& model() const;

 private:
  friend class RequestStream;
  Engine() = default;
  void Cancel(uint64_t id);
  // Runs `fn` on the loop thread between two steps and returns its result.
  Status RunOnLoop(std::function<Status()> fn);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flashroll::engine
