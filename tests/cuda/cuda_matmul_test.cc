// The CUDA backend's bf16 matrix kernel (tensor cores) on the GPU: a row's
// result is bitwise the same alone, among 16 and among 70 rows, the product
// is within f32 rounding of the exact one (the activations are not rounded
// to bf16), and the fused residual add is the plain f32 add.
//
// Skips, saying why, where no usable GPU is present.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/device/device_kernels.h"
#include "tests/cuda/cuda_test_support.h"

namespace flashroll::engine {
namespace {

using cuda_testing::kGpu;

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Problem {
  int64_t rows, cols, n;
  std::vector<uint16_t> w;
  std::vector<float> x;
};

Problem Make(int64_t rows, int64_t cols, int64_t n, uint32_t seed) {
  Problem p{rows, cols, n, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) p.w.push_back(ToBf16(normal(rng) * 0.05f));
  for (int64_t i = 0; i < n * cols; ++i) p.x.push_back(normal(rng));
  return p;
}

std::vector<float> Rows(const Problem& p, int64_t from, int64_t count) {
  return std::vector<float>(p.x.begin() + from * p.cols, p.x.begin() + (from + count) * p.cols);
}

class CudaMatMulTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

// Widths: a tail chunk (1000 is not a multiple of 32), 8 slices (4096) and
// the 16-slice cap (12288); rows: a tail tile (200 is not a multiple of 16).
TEST_P(CudaMatMulTest, RowsAreBitwiseTheSameAloneAmong16AndAmong70) {
  SKIP_WITHOUT_GPU();
  const auto [rows, cols] = GetParam();
  const Problem p = Make(rows, cols, 70, static_cast<uint32_t>(rows * 7919 + cols));
  auto all = DeviceMatMulBf16(kGpu, p.w, rows, cols, p.x, p.n);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto among16 = DeviceMatMulBf16(kGpu, p.w, rows, cols, Rows(p, 20, 16), 16);
  ASSERT_TRUE(among16.ok()) << among16.status().ToString();
  for (int64_t t : {0, 5, 20, 27, 35, 69}) {
    auto alone = DeviceMatMulBf16(kGpu, p.w, rows, cols, Rows(p, t, 1), 1);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    EXPECT_EQ(0, std::memcmp(alone->data(), all->data() + t * rows, rows * sizeof(float))) << "row " << t;
  }
  EXPECT_EQ(0, std::memcmp(among16->data(), all->data() + 20 * rows, 16 * rows * sizeof(float)));
}

// Within a few f32 roundings of the exact product of the bf16 weights and
// the f32 activations: rounding x to bf16 alone is about 20 times off.
TEST_P(CudaMatMulTest, ProductIsWithinF32RoundingOfTheExactOne) {
  SKIP_WITHOUT_GPU();
  const auto [rows, cols] = GetParam();
  const Problem p = Make(rows, cols, 9, static_cast<uint32_t>(rows + cols));
  auto y = DeviceMatMulBf16(kGpu, p.w, rows, cols, p.x, p.n);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  double worst = 0;
  for (int64_t t = 0; t < p.n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, magnitude = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double term = static_cast<double>(FromBf16(p.w[r * cols + c])) * p.x[t * cols + c];
        exact += term;
        magnitude += std::fabs(term);
      }
      worst = std::max(worst, std::fabs((*y)[t * rows + r] - exact) / magnitude);
    }
  }
  EXPECT_LE(worst, 2e-6) << "worst error relative to sum |w x|";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMatMulTest,
                         ::testing::Values(std::pair<int64_t, int64_t>{200, 1000}, std::pair<int64_t, int64_t>{48, 4096},
                                           std::pair<int64_t, int64_t>{64, 12288}));

TEST(CudaMatMulResidualTest, FusedResidualIsTheF32Add) {
  SKIP_WITHOUT_GPU();
  const Problem p = Make(40, 512, 20, 3);
  std::vector<float> residual(static_cast<size_t>(p.n * p.rows));
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : residual) v = normal(rng);
  auto plain = DeviceMatMulBf16(kGpu, p.w, p.rows, p.cols, p.x, p.n);
  auto fused = DeviceMatMulBf16(kGpu, p.w, p.rows, p.cols, p.x, p.n, residual);
  ASSERT_TRUE(plain.ok() && fused.ok());
  for (size_t i = 0; i < residual.size(); ++i) {
    const float expected = residual[i] + (*plain)[i];
    ASSERT_EQ(0, std::memcmp(&expected, &(*fused)[i], sizeof(float))) << i;
  }
}

}  // namespace
}  // namespace flashroll::engine
