// BlockManager: reference counts, the prefix cache's chained hashes and its
// least-recently-used eviction.
#include <gtest/gtest.h>

#include "engine/serving/block_manager.h"

namespace flashroll::engine {
namespace {

std::vector<int32_t> Tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(first + static_cast<int32_t>(i));
  return t;
}

TEST(BlockManagerTest, AllocatesUntilEmptyAndFreesOnLastRelease) {
  BlockManager m(3, 4, true);
  const int32_t a = m.Allocate(), b = m.Allocate(), c = m.Allocate();
  EXPECT_EQ(m.Allocate(), -1);
  EXPECT_EQ(m.used(), 3);
  m.AddRef(a);
  m.Release(a);
  EXPECT_EQ(m.available(), 0);
  m.Release(a);
  EXPECT_EQ(m.available(), 1);
  EXPECT_EQ(m.Allocate(), a);
  m.Release(b);
  m.Release(c);
  EXPECT_EQ(m.used(), 1);
}

TEST(BlockManagerTest, MatchesKnownPrefixesOnlyWithEqualTokensAndSalt) {
  BlockManager m(8, 4, true);
  const std::vector<int32_t> prompt = Tokens(10, 10);  // two full blocks + 2
  std::vector<uint64_t> hashes;
  EXPECT_TRUE(m.MatchPrefix(prompt, 10, 1, &hashes).empty());
  const int32_t b0 = m.Allocate(), b1 = m.Allocate();
  const uint64_t h0 = BlockManager::ChainHash(0, std::span(prompt).first(4), 1);
  const uint64_t h1 = BlockManager::ChainHash(h0, std::span(prompt).subspan(4, 4), 1);
  m.Register(b0, h0, std::span(prompt).first(4));
  m.Register(b1, h1, std::span(prompt).subspan(4, 4));
  m.Release(b0);
  m.Release(b1);
  EXPECT_EQ(m.used(), 0);  // cached, not held
  std::vector<int32_t> hit = m.MatchPrefix(prompt, 10, 1, &hashes);
  EXPECT_EQ(hit, (std::vector<int32_t>{b0, b1}));
  EXPECT_EQ(hashes, (std::vector<uint64_t>{h0, h1}));
  EXPECT_EQ(m.RefCount(b0), 1);
  EXPECT_EQ(m.hit_tokens(), 8);
  // max_blocks caps the match; another salt (weight version, dtype) misses.
  m.Release(b0);
  m.Release(b1);
  EXPECT_EQ(m.MatchPrefix(prompt, 1, 1, &hashes).size(), 1u);
  m.Release(b0);
  EXPECT_TRUE(m.MatchPrefix(prompt, 10, 2, &hashes).empty());
  // A different first block breaks the chain even if the second is equal.
  std::vector<int32_t> other = prompt;
  other[0] = 99;
  EXPECT_TRUE(m.MatchPrefix(other, 10, 1, &hashes).empty());
}

TEST(BlockManagerTest, EvictsLeastRecentlyUsedCachedBlocksWhenFreeRunsOut) {
  BlockManager m(2, 2, true);
  const std::vector<int32_t> a = Tokens(1, 2), b = Tokens(5, 2);
  const int32_t ba = m.Allocate(), bb = m.Allocate();
  m.Register(ba, BlockManager::ChainHash(0, a, 0), a);
  m.Register(bb, BlockManager::ChainHash(0, b, 0), b);
  m.Release(ba);  // cached first: least recently used
  m.Release(bb);
  const int32_t fresh = m.Allocate();
  EXPECT_EQ(fresh, ba);
  std::vector<uint64_t> hashes;
  EXPECT_TRUE(m.MatchPrefix(a, 1, 0, &hashes).empty());  // evicted
  EXPECT_EQ(m.MatchPrefix(b, 1, 0, &hashes).size(), 1u);  // still cached
}

TEST(BlockManagerTest, WithoutPrefixCachingNothingIsKnown) {
  BlockManager m(2, 2, false);
  const std::vector<int32_t> a = Tokens(1, 2);
  const int32_t ba = m.Allocate();
  m.Register(ba, BlockManager::ChainHash(0, a, 0), a);
  m.Release(ba);
  EXPECT_EQ(m.available(), 2);
  std::vector<uint64_t> hashes;
  EXPECT_TRUE(m.MatchPrefix(a, 1, 0, &hashes).empty());
}

}  // namespace
}  // namespace flashroll::engine
