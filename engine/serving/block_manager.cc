#include "engine/serving/block_manager.h"

#include <algorithm>
#include <cassert>

namespace flashroll::engine {
namespace {

// splitmix64's finaliser: a cheap, well-mixed 64-bit step.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  // Hand out low ids first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

uint64_t BlockManager::ChainHash(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt) {
  uint64_t h = Mix(parent ^ Mix(salt));
  for (int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;
}

void BlockManager::Forget(int32_t block) {
  Block& b = blocks_[block];
  if (!b.known) return;
  auto it = known_.find(b.hash);
  if (it != known_.end() && it->second == block) known_.erase(it);
  b.known = false;
  b.tokens.clear();
  b.routing.clear();
}

int32_t BlockManager::Allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    Forget(block);
  } else {
    return -1;
  }
  blocks_[block].refs = 1;
  blocks_[block].version = kUnwritten;
  return block;
}

void BlockManager::SetVersion(int32_t block, int64_t version, bool keep_identity) {
  blocks_[block].version = version;
  if (!keep_identity) Forget(block);
}

void BlockManager::AddRef(int32_t block) {
  Block& b = blocks_[block];
  if (b.refs == 0 && b.known) lru_.erase(b.lru);
  ++b.refs;
}

void BlockManager::Release(int32_t block) {
  Block& b = blocks_[block];
  assert(b.refs > 0);
  if (--b.refs > 0) return;
  if (b.known) {
    lru_.push_back(block);
    b.lru = std::prev(lru_.end());
  } else {
    free_.push_back(block);
  }
}

std::vector<int32_t> BlockManager::MatchPrefix(std::span<const int32_t> tokens, int64_t max_blocks, uint64_t salt,
                                               std::vector<uint64_t>* hashes, std::span<const uint8_t> routing) {
  std::vector<int32_t> out;
  hashes->clear();
  query_tokens_ += static_cast<int64_t>(tokens.size());
  if (!prefix_caching_) return out;
  const int64_t full = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / block_size_, max_blocks);
  uint64_t parent = 0;
  for (int64_t i = 0; i < full; ++i) {
    std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
    const uint64_t h = ChainHash(parent, chunk, salt);
    auto it = known_.find(h);
    if (it == known_.end()) break;
    const Block& b = blocks_[it->second];
    if (!std::equal(b.tokens.begin(), b.tokens.end(), chunk.begin(), chunk.end())) break;
    // Where the caller's routing covers the block, the block's must agree.
    const size_t from = static_cast<size_t>(i) * b.routing.size();
    if (from < routing.size()) {
      const size_t n = std::min(b.routing.size(), routing.size() - from);
      if (!std::equal(b.routing.begin(), b.routing.begin() + static_cast<long>(n), routing.begin() + static_cast<long>(from))) break;
    }
    AddRef(it->second);
    out.push_back(it->second);
    hashes->push_back(h);
    parent = h;
  }
  hit_tokens_ += static_cast<int64_t>(out.size()) * block_size_;
  return out;
}

void BlockManager::Register(int32_t block, uint64_t hash, std::span<const int32_t> tokens,
                            std::span<const uint8_t> routing) {
  if (!prefix_caching_ || known_.count(hash) != 0) return;
  Block& b = blocks_[block];
  if (b.known) return;
  b.known = true;
  b.hash = hash;
  b.tokens.assign(tokens.begin(), tokens.end());
  b.routing.assign(routing.begin(), routing.end());
  known_[hash] = block;
}

}  // namespace flashroll::engine
