#include "engine/serving/step_scheduler.h"

#include <algorithm>

namespace flashroll::engine {
namespace {

bool Older(const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; }

}  // namespace

void StepScheduler::AddWaiting(Sequence* seq) {
  seq->running = false;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, Older), seq);
}

void StepScheduler::AddRunning(Sequence* seq) {
  seq->running = true;
  running_.push_back(seq);
}

void StepScheduler::ReleaseBlocks(Sequence* seq) {
  // A partial re-prefill still pending is done by the recompute, from
  // scratch: the positions it had yet to rewrite route afresh, as it would
  // have routed them, instead of replaying the old weights' experts.
  if (seq->reprefilling()) {
    seq->routing.resize(std::min(seq->routing.size(),
                                 static_cast<size_t>(seq->reprefill_pos * options_.routing_token_bytes)));
  }
  for (int32_t b : seq->blocks) blocks_->Release(b);
  seq->blocks.clear();
  seq->hashes.clear();
  seq->computed = 0;
  seq->reprefill_pos = seq->reprefill_end = 0;  // nothing left to recompute in place
}

void StepScheduler::Remove(Sequence* seq) {
  if (!seq->paused) {
    auto& list = seq->running ? running_ : waiting_;
    list.erase(std::remove(list.begin(), list.end(), seq), list.end());
  }
  ReleaseBlocks(seq);
  seq->running = false;
  seq->paused = false;
}

void StepScheduler::Pause(Sequence* seq) {
  auto& list = seq->running ? running_ : waiting_;
  list.erase(std::remove(list.begin(), list.end(), seq), list.end());
  seq->running = false;
  seq->paused = true;
}

void StepScheduler::Resume(Sequence* seq) {
  seq->paused = false;
  if (seq->blocks.empty()) {
    AddWaiting(seq);
  } else {
    AddRunning(seq);
  }
}

void StepScheduler::Preempt(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  ReleaseBlocks(seq);
  AddWaiting(seq);
  ++preemptions_;
}

bool StepScheduler::OwnBlocks(Sequence* seq, int64_t from, int64_t to) {
  const int64_t bs = blocks_->block_size();
  for (int64_t b = from / bs; b * bs < to; ++b) {
    int32_t& shared = seq->blocks[b];
    if (blocks_->RefCount(shared) <= 1) continue;
    // The re-prefill writes every position of the block from its start on
    // (chunks run in order, and a position attends only to those before
    // it), so a fresh block needs no copy of the old contents.
    const int32_t own = blocks_->Allocate();
    if (own < 0) return false;
    blocks_->Release(shared);
    shared = own;
    // The cache knows the shared block, not this one.
    if (static_cast<int64_t>(seq->hashes.size()) > b) seq->hashes.resize(static_cast<size_t>(b));
  }
  return true;
}

bool StepScheduler::EnsureBlocks(Sequence* seq, int64_t upto) {
  const int64_t bs = blocks_->block_size();
  // The block that position `computed` falls in may be shared with a fork
  // sibling: write into a private copy.
  if (seq->computed % bs != 0) {
    int32_t& shared = seq->blocks[seq->computed / bs];
    if (blocks_->RefCount(shared) > 1) {
      const int32_t copy = blocks_->Allocate();
      if (copy < 0) return false;
      backend_->CopyKvBlock(shared, copy);
      blocks_->SetVersion(copy, blocks_->version(shared), /*keep_identity=*/true);
      blocks_->Release(shared);
      shared = copy;
    }
  }
  const int64_t need = (upto + bs - 1) / bs;
  while (static_cast<int64_t>(seq->blocks.size()) < need) {
    const int32_t b = blocks_->Allocate();
    if (b < 0) return false;
    seq->blocks.push_back(b);
  }
  return true;
}

std::vector<StepScheduler::Item> StepScheduler::Schedule() {
  std::vector<Item> plan;
  int64_t budget = options_.max_batch_tokens;
  auto planned = [&](const Sequence* s) {
    return std::any_of(plan.begin(), plan.end(), [&](const Item& it) { return it.seq == s; });
  };
  std::sort(running_.begin(), running_.end(), Older);
  // Decodes first, then unfinished prefills and recomputes.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    const std::vector<Sequence*> order = running_;
    for (Sequence* seq : order) {
      if (budget == 0) break;
      if (!seq->running || planned(seq)) continue;
      if (seq->reprefilling()) {
        // Its blocks exist already; it decodes once they are rewritten.
        if (pass == 0) continue;
        const int64_t n = std::min(seq->reprefill_end - seq->reprefill_pos, budget);
        if (!OwnBlocks(seq, seq->reprefill_pos, seq->reprefill_pos + n)) continue;
        plan.push_back({seq, n, seq->reprefill_pos, true});
        budget -= n;
        continue;
      }
      const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->computed;
      if ((remaining == 1) != (pass == 0)) continue;
      const int64_t n = std::min(remaining, budget);
      bool fits = EnsureBlocks(seq, seq->computed + n);
      while (!fits && reclaim_ && reclaim_()) fits = EnsureBlocks(seq, seq->computed + n);
      while (!fits) {
        // Preempt the youngest running sequence not already in this step.
        Sequence* victim = nullptr;
        for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
          if (!planned(*it)) {
            victim = *it;
            break;
          }
        }
        if (victim == nullptr) break;
        Preempt(victim);
        if (victim == seq) break;
        fits = EnsureBlocks(seq, seq->computed + n);
      }
      if (!fits) continue;
      plan.push_back({seq, n, seq->computed});
      budget -= n;
    }
  }
  // Admit waiting sequences in arrival order.
  while (budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front();
    const int64_t bs = blocks_->block_size();
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    if (seq->blocks.empty() && seq->pinned_version < 0) {
      // Positions whose logits are needed are computed again: the last one,
      // or for scoring every one from the prompt's last on.
      const int64_t first_logits = seq->scoring ? seq->prompt_len - 1 : len - 1;
      seq->blocks = blocks_->MatchPrefix(seq->tokens, first_logits / bs, options_.salt, &seq->hashes, seq->routing);
      seq->computed = static_cast<int64_t>(seq->blocks.size()) * bs;
      // The routing of cached tokens comes with their blocks.
      // (MatchPrefix checked them against what the sequence already holds.)
      const size_t block_bytes = static_cast<size_t>(options_.routing_token_bytes * bs);
      for (size_t b = 0; block_bytes > 0 && b < seq->blocks.size(); ++b) {
        if (seq->routing.size() >= (b + 1) * block_bytes) continue;
        std::span<const uint8_t> r = blocks_->routing(seq->blocks[b]);
        seq->routing.insert(seq->routing.end(), r.begin() + static_cast<long>(seq->routing.size() - b * block_bytes),
                            r.end());
      }
    }
    int64_t n = std::min(len - seq->computed, budget);
    auto room = [&] { return (static_cast<int64_t>(seq->blocks.size()) + blocks_->available()) * bs - seq->computed; };
    // Paused sessions give their blocks back before this one is held back.
    while (room() < n && reclaim_ && reclaim_()) {
    }
    n = std::min(n, room());
    if (n <= 0 || !EnsureBlocks(seq, seq->computed + n)) {
      ReleaseBlocks(seq);
      break;
    }
    waiting_.erase(waiting_.begin());
    AddRunning(seq);
    plan.push_back({seq, n, seq->computed});
    budget -= n;
  }
  return plan;
}

void StepScheduler::Commit(const std::vector<Item>& plan) {
  const int64_t bs = blocks_->block_size();
  for (const Item& it : plan) {
    Sequence* seq = it.seq;
    const int64_t version = seq->pinned_version >= 0 ? seq->pinned_version : version_;
    if (it.reprefill) {
      // Blocks whose written part is now all rewritten hold this version's KV.
      const int64_t from = it.start / bs, upto = it.start + it.num_tokens;
      seq->reprefill_pos = upto;
      for (int64_t b = from; b * bs < upto; ++b) {
        if (std::min((b + 1) * bs, seq->computed) <= upto) blocks_->SetVersion(seq->blocks[b], version, false);
      }
      continue;
    }
    for (int64_t b = it.start / bs; b * bs < it.start + it.num_tokens; ++b) blocks_->MarkWritten(seq->blocks[b], version);
    seq->computed += it.num_tokens;
    const int64_t full = seq->cacheable ? seq->computed / bs : 0;
    while (static_cast<int64_t>(seq->hashes.size()) < full) {
      const int64_t i = static_cast<int64_t>(seq->hashes.size());
      std::span<const int32_t> chunk(seq->tokens.data() + i * bs, static_cast<size_t>(bs));
      const uint64_t h = BlockManager::ChainHash(i == 0 ? 0 : seq->hashes.back(), chunk, options_.salt);
      // A MoE block is known with its routing, or not at all.
      const size_t rb = static_cast<size_t>(bs * options_.routing_token_bytes);
      if (seq->routing.size() < (static_cast<size_t>(i) + 1) * rb) break;
      blocks_->Register(seq->blocks[i], h, chunk,
                        std::span<const uint8_t>(seq->routing).subspan(static_cast<size_t>(i) * rb, rb));
      seq->hashes.push_back(h);
    }
  }
}

}  // namespace flashroll::engine
