// PagedKvStorage's token export and import: the flat layout does not depend
// on which blocks hold the tokens, and a round trip into other blocks keeps
// every byte.
#include "engine/models/paged_kv_storage.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll::engine {
namespace {

TEST(PagedKvStorageTest, ExportIsTokenMajorPerHeadAndImportsIntoOtherBlocks) {
  const KvLayout layout{.num_layers = 2, .num_kv_heads = 2, .head_dim = 3, .block_size = 4, .dtype = KvDType::kF32};
  PagedKvStorage kv(layout);
  kv.Resize(6);
  // Element (layer, keys or values, head, position in block, dim) of block b holds a value naming it all.
  const std::vector<int32_t> table = {4, 1};
  auto value = [](int64_t l, int64_t kv_index, int64_t h, int64_t token, int64_t d) {
    return static_cast<float>(l * 10000 + kv_index * 1000 + h * 100 + token * 10 + d);
  };
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t k = 0; k < 2; ++k) {
      float* base = reinterpret_cast<float*>(k == 0 ? kv.KeyBase(l) : kv.ValueBase(l));
      for (size_t b = 0; b < table.size(); ++b) {
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t t = 0; t < 4; ++t) {
            for (int64_t d = 0; d < 3; ++d) {
              base[(table[b] * 2 * 4 + h * 4 + t) * 3 + d] = value(l, k, h, static_cast<int64_t>(b) * 4 + t, d);
            }
          }
        }
      }
    }
  }
  const int64_t tokens = 6;  // the second block half full
  std::vector<float> flat(static_cast<size_t>(tokens * layout.TokenBytes() / 4));
  kv.ExportTokens(table, tokens, reinterpret_cast<uint8_t*>(flat.data()));
  size_t i = 0;
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t k = 0; k < 2; ++k) {
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t d = 0; d < 3; ++d, ++i) ASSERT_EQ(flat[i], value(l, k, h, t, d)) << i;
        }
      }
    }
  }
  ASSERT_EQ(i, flat.size());

  const std::vector<int32_t> other = {0, 5};
  kv.ImportTokens(other, tokens, reinterpret_cast<const uint8_t*>(flat.data()));
  std::vector<float> again(flat.size());
  kv.ExportTokens(other, tokens, reinterpret_cast<uint8_t*>(again.data()));
  EXPECT_EQ(std::memcmp(again.data(), flat.data(), flat.size() * 4), 0);
}

}  // namespace
}  // namespace flashroll::engine
