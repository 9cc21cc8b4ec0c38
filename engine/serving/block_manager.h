// BlockManager: which KV blocks are free, who holds each, and which full
// blocks hold a known token prefix (prefix caching).
//
// A block has a reference count: every sequence whose block table lists it
// holds one reference. The G samples of a group share their prompt's blocks;
// a sequence about to write into a block that others also hold copies it
// first (copy-on-write, done by the engine through the backend).
//
// Prefix caching: a full block is known by a chained hash of its tokens, the
// hash of the block before it, and a salt for everything else that shapes
// its contents (the model, the weight version that wrote it, the KV dtype).
// A new sequence takes references on the longest run of known blocks its
// prompt starts with. A known block nobody holds stays cached, and is evicted
// least recently used first when a fresh block is needed. Tokens are kept
// with each known block and compared on a hit, so a hash collision is a miss.
// A MoE model's known blocks also keep the routing of their tokens
// (routing.h), handed to the sequences that hit them.
//
// Every block records the oldest weight version that wrote KV into it
// (kUnwritten when nothing has been written since Allocate), so that after a
// weight swap the engine can recompute just the blocks that are too old
// (EngineOptions::reprefill_older_than).
//
// Thread safety: none; the engine loop thread owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace flashroll::engine {

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  // Blocks that Allocate can hand out: free ones and cached ones nobody holds.
  int64_t available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  // Blocks some sequence holds.
  int64_t used() const { return num_blocks() - available(); }

  // A block with one reference and no identity, or -1 when none is left.
  // May evict the least recently used cached block.
  int32_t Allocate();
  void AddRef(int32_t block);
  // Drops one reference; at zero a known block is cached, others are freed.
  void Release(int32_t block);
  int32_t RefCount(int32_t block) const { return blocks_[block].refs; }

  static constexpr int64_t kUnwritten = INT64_MAX;
  // The oldest version whose KV the block holds (kUnwritten: none yet).
  int64_t version(int32_t block) const { return blocks_[block].version; }
  // KV written into the block by `version`, beside what it held.
  void MarkWritten(int32_t block, int64_t version) {
    blocks_[block].version = std::min(blocks_[block].version, version);
  }
  // Everything the block holds is now `version`'s (recomputed, copied or
  // read back); its prefix-cache identity, which named older KV, is dropped
  // unless `keep_identity`.
  void SetVersion(int32_t block, int64_t version, bool keep_identity);

  // The hash of a full block of `tokens` that follows a block hashed `parent`
  // (0 for the first block).
  static uint64_t ChainHash(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt);

  // The longest run of known blocks that the full blocks of `tokens` start
  // with, at most max_blocks; a reference is taken on each. *hashes receives
  // their chained hashes. Counts the looked-up and hit tokens. `routing`, the
  // compact routing the caller already holds for its first tokens, stops
  // the run at the first block whose own routing disagrees with it.
  std::vector<int32_t> MatchPrefix(std::span<const int32_t> tokens, int64_t max_blocks, uint64_t salt,
                                   std::vector<uint64_t>* hashes, std::span<const uint8_t> routing = {});
  // Makes `block` (full, holding `tokens`, routed as `routing` says) known
  // under `hash`, unless another block already is.
  void Register(int32_t block, uint64_t hash, std::span<const int32_t> tokens,
                std::span<const uint8_t> routing = {});
  // The routing a known block was registered with (empty for dense models).
  std::span<const uint8_t> routing(int32_t block) const { return blocks_[block].routing; }

  int64_t query_tokens() const { return query_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  struct Block {
    int32_t refs = 0;
    int64_t version = kUnwritten;
    bool known = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> routing;  // [token][moe_layer][k], compact
    std::list<int32_t>::iterator lru;  // valid while cached (known, refs == 0)
  };
  void Forget(int32_t block);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // cached blocks, least recently used first
  std::unordered_map<uint64_t, int32_t> known_;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace flashroll::engine
