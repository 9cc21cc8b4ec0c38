#include <algorithm>

#include "engine/serving/engine_state.h"
#include "engine/serving/sequence_file.h"

namespace flashroll::engine {

// ---- Pause, resume, persist to disk ---------------------------------------

Status Engine::State::Persist(Sequence* seq) {
  SequenceSnapshot snap;
  snap.sequence_id = seq->id;
  snap.choice = seq->choice;
  snap.scoring = seq->scoring;
  snap.weight_version = VersionOf(*seq);
  snap.layout = kv_layout;
  snap.prompt_len = seq->prompt_len;
  snap.computed = seq->computed;
  snap.tokens = seq->tokens;
  snap.hashes = seq->hashes;
  snap.routing = seq->routing;
  const int64_t bs = kv_layout.block_size;
  for (int64_t b = 0; b < (seq->computed + bs - 1) / bs; ++b) snap.block_versions.push_back(blocks->version(seq->blocks[b]));
  const size_t bytes = static_cast<size_t>(seq->computed * kv_layout.TokenBytes());
  std::unique_ptr<uint8_t[]> kv(new uint8_t[bytes]);  // left uninitialised: written over at once
  backend->ExportKv(seq->blocks, seq->computed, kv.get());
  snap.kv = std::span<const uint8_t>(kv.get(), bytes);
  const std::string path = SequenceFilePath(options.persist_dir, seq->id);
  FR_RETURN_IF_ERROR(WriteSequenceFile(path, snap));
  seq->persisted = path;
  return Status::Ok();
}

Status Engine::State::Restore(Sequence* seq) {
  const std::string path = std::exchange(seq->persisted, std::string());
  Result<SequenceSnapshot> read = ReadSequenceFile(path);
  RemoveSequenceFile(path);  // whether it reads or not, it is spent
  if (!read.ok()) return read.status();
  const SequenceSnapshot& snap = *read;
  const std::string where = "sequence file " + path + ": ";
  if (snap.layout != kv_layout) {
    return Status::Corruption(where + "holds KV of " + std::to_string(snap.layout.num_layers) + " layers x " +
                              std::to_string(snap.layout.num_kv_heads) + " heads x " +
                              std::to_string(snap.layout.head_dim) + " " + KvDTypeName(snap.layout.dtype) +
                              " in blocks of " + std::to_string(snap.layout.block_size) + ", not the engine's " +
                              std::to_string(kv_layout.num_layers) + " x " + std::to_string(kv_layout.num_kv_heads) +
                              " x " + std::to_string(kv_layout.head_dim) + " " + KvDTypeName(kv_layout.dtype) +
                              " in blocks of " + std::to_string(kv_layout.block_size));
  }
  // A session may have grown since: its file holds a prefix of its tokens.
  const bool tokens_match =
      seq->in_session ? snap.tokens.size() <= seq->tokens.size() &&
                            std::equal(snap.tokens.begin(), snap.tokens.end(), seq->tokens.begin())
                      : snap.prompt_len == seq->prompt_len && snap.tokens == seq->tokens;
  if (snap.sequence_id != seq->id || snap.choice != seq->choice || snap.scoring != seq->scoring || !tokens_match) {
    return Status::Corruption(where + "holds sequence " + std::to_string(snap.sequence_id) + " (" +
                              std::to_string(snap.tokens.size()) + " tokens), not paused sequence " +
                              std::to_string(seq->id) + " (" + std::to_string(seq->tokens.size()) + " tokens)");
  }
  const int64_t tb = routing.TokenBytes();
  if ((tb == 0 && !snap.routing.empty()) ||
      (tb > 0 && (static_cast<int64_t>(snap.routing.size()) % tb != 0 ||
                  static_cast<int64_t>(snap.routing.size()) / tb > static_cast<int64_t>(snap.tokens.size())))) {
    return Status::Corruption(where + "holds " + std::to_string(snap.routing.size()) +
                              " bytes of routing, not whole tokens of " + std::to_string(tb) + " bytes for at most " +
                              std::to_string(snap.tokens.size()) + " tokens");
  }
  seq->routing = snap.routing;
  const int64_t bs = kv_layout.block_size;
  const int64_t need = (snap.computed + bs - 1) / bs;
  if (blocks->available() < need) {
    // Recomputed once resumed, like a preempted sequence. With
    // reprefill_older_than, from the first block too old on its tokens route
    // afresh: their recorded experts are the old weights'.
    if (options.reprefill_older_than >= 0 && !seq->scoring && seq->pinned_version < 0) {
      const int64_t keep_from = version.load() - options.reprefill_older_than;
      for (int64_t b = 0; b < need; ++b) {
        if (snap.block_versions[b] >= keep_from) continue;
        seq->routing.resize(std::min(seq->routing.size(), static_cast<size_t>(b * bs * tb)));
        break;
      }
    }
    return Status::Ok();
  }
  for (int64_t b = 0; b < need; ++b) seq->blocks.push_back(blocks->Allocate());
  backend->ImportKv(seq->blocks, snap.computed, snap.kv.data());
  seq->computed = snap.computed;
  for (int64_t b = 0; b < need; ++b) blocks->SetVersion(seq->blocks[b], snap.block_versions[b], true);
  // The full blocks are known to the prefix cache again, as before the
  // pause: a MoE block with its tokens' routing (a hit hands it out), or
  // not at all.
  seq->hashes = snap.hashes;
  const size_t block_routing = static_cast<size_t>(bs * tb);
  for (size_t i = 0; i < seq->hashes.size(); ++i) {
    if (seq->routing.size() < (i + 1) * block_routing) {
      seq->hashes.resize(i);
      break;
    }
    blocks->Register(seq->blocks[i], seq->hashes[i],
                     std::span<const int32_t>(seq->tokens).subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs)),
                     std::span<const uint8_t>(seq->routing).subspan(i * block_routing, block_routing));
  }
  PlanReprefill(seq);  // weights may have been swapped while it was on disk
  return Status::Ok();
}

void Engine::State::PlanReprefill(Sequence* seq) {
  if (options.reprefill_older_than < 0 || seq->scoring || seq->blocks.empty() || seq->pinned_version >= 0) return;
  const int64_t keep_from = version.load() - options.reprefill_older_than;
  const int64_t bs = kv_layout.block_size;
  int64_t first = -1, last = -1;
  for (int64_t b = 0; b < (seq->computed + bs - 1) / bs; ++b) {
    if (blocks->version(seq->blocks[b]) >= keep_from) continue;
    if (first < 0) first = b;
    last = b;
  }
  if (first < 0) return;
  seq->reprefill_pos = first * bs;
  seq->reprefill_end = std::min(seq->computed, (last + 1) * bs);
}

Status Engine::Pause(uint64_t sequence_id, PauseOptions options) {
  if (options.to_disk && state_->options.persist_dir.empty()) {
    return Status::FailedPrecondition("pausing sequence " + std::to_string(sequence_id) +
                                      " to disk needs the engine's persist_dir, which is not set");
  }
  return RunOnLoop([this, sequence_id, options]() -> Status {
    auto it = state_->live.find(sequence_id);
    if (it == state_->live.end()) return Status::NotFound("sequence " + std::to_string(sequence_id) + " is not running");
    if (it->second->paused) return Status::FailedPrecondition("sequence " + std::to_string(sequence_id) + " is already paused");
    // Written before pausing: when the write fails the sequence runs on.
    if (options.to_disk) FR_RETURN_IF_ERROR(state_->Persist(it->second));
    state_->scheduler->Pause(it->second);
    if (options.to_disk) {
      state_->scheduler->ReleaseBlocks(it->second);
      std::vector<uint8_t>().swap(it->second->routing);  // in the file until Resume
    }
    return Status::Ok();
  });
}

Status Engine::Resume(uint64_t sequence_id) {
  return RunOnLoop([this, sequence_id]() -> Status {
    auto it = state_->live.find(sequence_id);
    if (it == state_->live.end()) return Status::NotFound("sequence " + std::to_string(sequence_id) + " is not running");
    if (!it->second->paused) return Status::FailedPrecondition("sequence " + std::to_string(sequence_id) + " is not paused");
    Sequence* seq = it->second;
    if (seq->in_session && seq->owner == nullptr) {
      return Status::FailedPrecondition("sequence " + std::to_string(sequence_id) +
                                        " is a session's between turns: generate in the session");
    }
    if (!seq->persisted.empty()) {
      Status restored = state_->Restore(seq);
      if (!restored.ok()) {
        state_->Fail(seq, restored);
        return restored;
      }
    }
    state_->scheduler->Resume(seq);
    return Status::Ok();
  });
}

Result<SequenceInfo> Engine::GetSequence(uint64_t sequence_id) {
  SequenceInfo info;
  Status st = RunOnLoop([&]() -> Status {
    auto it = state_->live.find(sequence_id);
    if (it == state_->live.end()) return Status::NotFound("sequence " + std::to_string(sequence_id) + " is not running");
    const Sequence& seq = *it->second;
    info.id = seq.id;
    info.state = seq.paused ? "paused" : seq.running ? "running" : "waiting";
    info.prompt_tokens = seq.prompt_len;
    info.generated_tokens = static_cast<int64_t>(seq.tokens.size()) - seq.prompt_len;
    info.kv_blocks = static_cast<int64_t>(seq.blocks.size());
    info.on_disk = !seq.persisted.empty();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return info;
}

}  // namespace flashroll::engine
