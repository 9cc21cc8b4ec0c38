// StepScheduler: which sequences run in the next step, and how many tokens
// of each.
//
// A sequence holds tokens (prompt, then what it generated) of which the
// first `computed` have keys and values in its blocks. Each step runs, for
// every scheduled sequence, its next uncomputed tokens: one for a decode, a
// chunk for a prefill or a recompute after preemption. So prefill chunks and
// decodes share one flattened batch under a token budget. Running sequences
// go first (decodes, then unfinished prefills, oldest first); waiting ones
// are admitted in arrival order while the budget, max_running and the KV
// blocks allow. When a running sequence needs a block and none is left, the
// youngest running sequence is preempted: its blocks are released and it
// waits to be recomputed (its full blocks likely stay cached).
//
// A running sequence may also have a partial re-prefill pending (after a
// weight swap, EngineOptions::reprefill_older_than): positions
// [reprefill_pos, reprefill_end) of its computed KV are run again, in
// chunks, over the blocks that hold them, before it decodes further. Commit
// records in each block the version that wrote it (BlockManager::version):
// the current one, or the version a pinned sequence runs on.
//
// Thread safety: none; the engine loop thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/serving/backend.h"
#include "engine/serving/block_manager.h"

namespace flashroll::engine {

struct Sequence {
  uint64_t id = 0;                 // the engine's sequence id
  uint64_t arrival = 0;            // admission order; larger = younger
  std::vector<int32_t> tokens;     // prompt + generated
  int64_t prompt_len = 0;
  int64_t computed = 0;            // tokens with KV in `blocks`
  std::vector<int32_t> blocks;     // block table
  std::vector<uint64_t> hashes;    // chained hashes of the leading full blocks known to the cache
  bool running = false;
  bool paused = false;
  bool scoring = false;            // logits wanted from position prompt_len - 1 on, nothing sampled
  void* owner = nullptr;           // the engine's request
  int32_t choice = 0;
  std::string persisted;           // its sequence file while paused to disk
  // MoE models: the experts of every token computed so far, compact
  // (routing.h, [token][moe_layer][k]); it may run ahead of `computed` (a
  // preempted sequence keeps it). Empty for dense models.
  std::vector<uint8_t> routing;
  // Its KV and routing all came from the current weights' own router, so
  // its full blocks may be made known to the prefix cache.
  bool cacheable = true;
  // A partial re-prefill in progress: computed positions to run again.
  int64_t reprefill_pos = 0, reprefill_end = 0;
  bool reprefilling() const { return reprefill_pos < reprefill_end; }
  // -1: it runs on the current weights. Else the older weight version it is
  // pinned to (GenerationRequest::pin_version), which writes its KV; it
  // takes nothing from the prefix cache, whose blocks are the current
  // version's.
  int64_t pinned_version = -1;
  // A session's sequence (Engine::OpenSession): parked, not retired, when
  // a turn ends; its id is the session's.
  bool in_session = false;
  // How far its computed positions ever reached: computing a position
  // below it again is a recompute.
  int64_t computed_high = 0;
  // Tokens it computed in prefill passes, and of those recomputed.
  int64_t prefill_tokens = 0, reprefill_tokens = 0;
};

struct StepOptions {
  int64_t max_running = 64;
  int64_t max_batch_tokens = 512;
  uint64_t salt = 0;  // prefix-cache salt: model, weight version, KV dtype
  int64_t routing_token_bytes = 0;  // RoutingShape::TokenBytes(); 0 for dense models
};

class StepScheduler {
 public:
  StepScheduler(BlockManager* blocks, Backend* backend, const StepOptions& options)
      : blocks_(blocks), backend_(backend), options_(options) {}

  struct Item {
    Sequence* seq;
    int64_t num_tokens;
    int64_t start = 0;       // the first position it runs (seq->computed, or reprefill_pos)
    bool reprefill = false;  // recomputes positions below seq->computed; no logits
  };

  void AddWaiting(Sequence* seq);
  // Adds a sequence that already holds its blocks (a fork) as running.
  void AddRunning(Sequence* seq);
  // Takes a sequence out (finished or cancelled) and releases its blocks.
  void Remove(Sequence* seq);
  // Takes a sequence out of the batch but keeps its blocks (paused); Resume
  // puts it back, running if it holds KV, else waiting.
  void Pause(Sequence* seq);
  void Resume(Sequence* seq);
  // Releases a sequence's blocks (its KV saved elsewhere, or to be
  // recomputed): nothing computed is left.
  void ReleaseBlocks(Sequence* seq);

  // Plans the next step: allocates (and copies on write) the blocks every
  // planned token needs. Empty when nothing can run.
  std::vector<Item> Schedule();
  // After the step ran: marks the planned tokens computed and makes newly
  // full blocks known to the prefix cache.
  void Commit(const std::vector<Item>& plan);

  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // New blocks are known under this salt from now on (a weight swap).
  void set_salt(uint64_t salt) { options_.salt = salt; }
  // The weight version that writes the KV of the next steps.
  void set_version(int64_t version) { version_ = version; }
  // Called when a sequence needs blocks and none is free, before any
  // running sequence is preempted or a waiting one is held back: frees the
  // blocks of some paused sequence the engine may take them from, false
  // when there is none.
  void set_reclaim(std::function<bool()> reclaim) { reclaim_ = std::move(reclaim); }

 private:
  bool EnsureBlocks(Sequence* seq, int64_t upto);
  // Gives `seq` blocks of its own for positions [from, to) that a partial
  // re-prefill is about to rewrite: a block it shares (a fork sibling, or
  // the same prompt matched in the prefix cache) may belong to a sequence
  // whose KV must stay as it is (one pinned to the old weights). False
  // when no block is free.
  bool OwnBlocks(Sequence* seq, int64_t from, int64_t to);
  void Preempt(Sequence* seq);

  BlockManager* blocks_;
  Backend* backend_;
  StepOptions options_;
  std::vector<Sequence*> waiting_;  // ascending arrival
  std::vector<Sequence*> running_;
  int64_t preemptions_ = 0;
  int64_t version_ = 0;
  std::function<bool()> reclaim_;
};

}  // namespace flashroll::engine
