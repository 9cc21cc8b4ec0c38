// The paged attention kernel against a plain softmax attention, and its
// batch invariance: a row's output does not depend on the other rows of the
// call or on the thread count.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kernels/attention.h"
#include "engine/kernels/cpu_threads.h"
#include "engine/kernels/dtype.h"

namespace flashroll::kernels {
namespace {

struct Fixture {
  int64_t heads, kv_heads, hd, bs;
  bool bf16;
  std::vector<uint8_t> k, v;  // [block][kv_head][slot][hd]
  std::vector<int32_t> table;
  int64_t len;

  Fixture(int64_t heads_, int64_t kv_heads_, int64_t hd_, int64_t bs_, bool bf16_, int64_t len_, uint32_t seed)
      : heads(heads_), kv_heads(kv_heads_), hd(hd_), bs(bs_), bf16(bf16_), len(len_) {
    const int64_t blocks = (len + bs - 1) / bs;
    // A shuffled block table: blocks of one sequence need not be adjacent.
    for (int64_t b = 0; b < blocks; ++b) table.push_back(static_cast<int32_t>(b));
    std::mt19937 rng(seed);
    std::shuffle(table.begin(), table.end(), rng);
    const int64_t elem = bf16 ? 2 : 4;
    k.resize(static_cast<size_t>(blocks * kv_heads * bs * hd * elem));
    v.resize(k.size());
    std::normal_distribution<float> normal(0, 1);
    for (int64_t i = 0; i < blocks * kv_heads * bs * hd; ++i) {
      Store(&k, i, normal(rng));
      Store(&v, i, normal(rng));
    }
  }
  void Store(std::vector<uint8_t>* buf, int64_t i, float f) const {
    if (bf16) {
      const uint16_t h = F32ToBf16(f);
      std::memcpy(buf->data() + i * 2, &h, 2);
    } else {
      std::memcpy(buf->data() + i * 4, &f, 4);
    }
  }
  float Load(const std::vector<uint8_t>& buf, int64_t pos, int64_t kvh, int64_t d) const {
    const int64_t i = ((table[pos / bs] * kv_heads + kvh) * bs + pos % bs) * hd + d;
    if (bf16) {
      uint16_t h;
      std::memcpy(&h, buf.data() + i * 2, 2);
      return Bf16ToF32(h);
    }
    float f;
    std::memcpy(&f, buf.data() + i * 4, 4);
    return f;
  }
  PagedAttentionArgs Args(const float* q, float* out, int64_t rows, const int64_t* positions,
                          const int32_t* const* tables) const {
    PagedAttentionArgs a;
    a.q = q;
    a.out = out;
    a.rows = rows;
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.k_base = k.data();
    a.v_base = v.data();
    a.half_block_bytes = kv_heads * bs * hd * (bf16 ? 2 : 4);
    a.block_size = bs;
    a.bf16 = bf16;
    a.positions = positions;
    a.block_tables = tables;
    return a;
  }
};

std::vector<float> Reference(const Fixture& f, const float* q, int64_t pos) {
  std::vector<float> out(static_cast<size_t>(f.heads * f.hd));
  const int64_t group = f.heads / f.kv_heads;
  for (int64_t h = 0; h < f.heads; ++h) {
    std::vector<double> s(static_cast<size_t>(pos + 1));
    double max = -1e300;
    for (int64_t j = 0; j <= pos; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < f.hd; ++d) dot += double(q[h * f.hd + d]) * f.Load(f.k, j, h / group, d);
      s[j] = dot / std::sqrt(double(f.hd));
      max = std::max(max, s[j]);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - max));
    for (int64_t d = 0; d < f.hd; ++d) {
      double acc = 0;
      for (int64_t j = 0; j <= pos; ++j) acc += s[j] * f.Load(f.v, j, h / group, d);
      out[h * f.hd + d] = static_cast<float>(acc / sum);
    }
  }
  return out;
}

class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t>> {};

TEST_P(PagedAttentionTest, MatchesPlainSoftmaxAttention) {
  const auto [bf16, hd, bs] = GetParam();
  // 600 keys: three flash-decoding splits of kSplitKeys, the last partial.
  Fixture f(8, 2, hd, bs, bf16, 600, 7);
  const std::vector<int64_t> positions = {0, 1, bs - 1, bs, kSplitKeys - 1, kSplitKeys, 599};
  const int64_t rows = static_cast<int64_t>(positions.size());
  std::vector<float> q(static_cast<size_t>(rows * f.heads * hd));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : q) x = normal(rng);
  std::vector<const int32_t*> tables(static_cast<size_t>(rows), f.table.data());
  std::vector<float> out(q.size());
  AttentionScratch scratch;
  PagedAttention(f.Args(q.data(), out.data(), rows, positions.data(), tables.data()), &scratch);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> ref = Reference(f, &q[r * f.heads * hd], positions[r]);
    for (int64_t i = 0; i < f.heads * hd; ++i) {
      ASSERT_NEAR(out[r * f.heads * hd + i], ref[i], 2e-5) << "row " << r << " position " << positions[r] << " i " << i;
    }
  }
}

TEST_P(PagedAttentionTest, RowResultsDoNotDependOnTheBatchOrThreads) {
  const auto [bf16, hd, bs] = GetParam();
  Fixture f(8, 2, hd, bs, bf16, 700, 11);
  std::vector<int64_t> positions;
  for (int64_t p = 0; p < 700; p += 37) positions.push_back(p);
  const int64_t rows = static_cast<int64_t>(positions.size());
  const int64_t width = f.heads * hd;
  std::vector<float> q(static_cast<size_t>(rows * width));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : q) x = normal(rng);
  std::vector<const int32_t*> tables(static_cast<size_t>(rows), f.table.data());
  AttentionScratch scratch;
  std::vector<float> batched(q.size());
  SetThreads(2);
  PagedAttention(f.Args(q.data(), batched.data(), rows, positions.data(), tables.data()), &scratch);
  SetThreads(1);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> alone(static_cast<size_t>(width));
    PagedAttention(f.Args(&q[r * width], alone.data(), 1, &positions[r], tables.data()), &scratch);
    ASSERT_EQ(0, std::memcmp(alone.data(), &batched[r * width], alone.size() * sizeof(float))) << "row " << r;
  }
  SetThreads(2);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PagedAttentionTest,
                         ::testing::Values(std::make_tuple(false, int64_t{64}, int64_t{16}),
                                           std::make_tuple(true, int64_t{64}, int64_t{16}),
                                           std::make_tuple(false, int64_t{128}, int64_t{32}),
                                           std::make_tuple(true, int64_t{40}, int64_t{16})));

}  // namespace
}  // namespace flashroll::kernels
