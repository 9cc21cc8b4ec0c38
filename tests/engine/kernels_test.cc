// Tests of engine/kernels: dtype layouts and conversions, GGUF-compatible
// quantisation, MatMul on every dtype and ISA path against a double-precision
// reference, the worker pool, and the element-wise kernels.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kernels/cpu_isa.h"
#include "engine/kernels/cpu_threads.h"
#include "engine/kernels/dtype.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quantize.h"
#include "engine/kernels/vector_ops.h"

namespace flashroll::kernels {
namespace {

constexpr float kEps = 5.9604645e-8f;  // 2^-24, unit roundoff of f32

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

std::vector<float> RandomVector(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Forces an ISA path for one test and restores the detected one afterwards.
class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!IsaSupported(GetParam())) GTEST_SKIP() << "CPU lacks " << IsaName(GetParam());
    ASSERT_TRUE(TEST_ForceIsa(GetParam()).ok());
  }
  void TearDown() override { ASSERT_TRUE(TEST_ForceIsa(DetectIsa()).ok()); }
};

std::string IsaParamName(const ::testing::TestParamInfo<Isa>& info) { return IsaName(info.param); }

// ---- dtype ---------------------------------------------------------------

TEST(KernelDType, RowBytesFollowGgufLayouts) {
  EXPECT_EQ(*RowBytes(DType::kF32, 7), 28);
  EXPECT_EQ(*RowBytes(DType::kF16, 7), 14);
  EXPECT_EQ(*RowBytes(DType::kBF16, 7), 14);
  EXPECT_EQ(*RowBytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(*RowBytes(DType::kQ4_0, 64), 36);
  EXPECT_EQ(*RowBytes(DType::kQ8_0, 0), 0);
  const auto bad = RowBytes(DType::kQ4_0, 48);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("q4_0"), std::string::npos);
  EXPECT_FALSE(RowBytes(DType::kF32, -1).ok());
}

TEST(KernelDType, F16KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // halfway to 2^16 rounds to even: inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);        // tie, to even
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -26)), 0x0001);        // 0.75 ulp rounds up
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);        // tie 1.5 -> 2
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00); // tie, to even
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(3.0f, -11)), 0x3c02); // tie, to even (up)
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
  EXPECT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x8400), -std::ldexp(1.0f, -14));
}

TEST(KernelDType, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f)))) << h;
      continue;
    }
    ASSERT_EQ(F32ToF16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(KernelDType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808000u)), 0x3f80);  // tie, to even
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000u)), 0x3f82);  // tie, to even (up)
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(Bf16ToF32(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
  EXPECT_EQ(Bits(Bf16ToF32(F32ToBf16(-0.0f))), 0x80000000u);
}

// ---- quantisation --------------------------------------------------------

TEST(KernelQuantize, Q8_0HandComputedBlocks) {
  // Block 0: max |x| = 127, so d = 1 and q = round-half-away(x).
  // Block 1: max |x| = 63.5, so d = 0.5 and q = round-half-away(2x).
  std::vector<float> x(64, 0.0f);
  x[0] = -127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = 126.6f;
  x[31] = 1.4f;
  x[32] = 63.5f;
  x[33] = 0.75f;
  x[34] = -0.25f;
  x[35] = -63.5f;
  x[63] = 10.1f;
  BlockQ8_0 b[2];
  ASSERT_TRUE(QuantizeRow(DType::kQ8_0, x.data(), 64, b).ok());
  EXPECT_EQ(b[0].d, 0x3c00);  // 1.0
  const int8_t want0[32] = {-127, 3, -3, 0, 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0,    0, 0,  0, 0,   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(std::memcmp(b[0].qs, want0, 32), 0);
  EXPECT_EQ(b[1].d, 0x3800);  // 0.5
  const int8_t want1[32] = {127, 2, -1, -127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0,   0, 0,  0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20};
  EXPECT_EQ(std::memcmp(b[1].qs, want1, 32), 0);
  std::vector<float> back(64);
  ASSERT_TRUE(DequantizeRow(DType::kQ8_0, b, 64, back.data()).ok());
  EXPECT_EQ(back[1], 3.0f);
  EXPECT_EQ(back[33], 1.0f);
  EXPECT_EQ(back[34], -0.5f);
  EXPECT_EQ(back[63], 10.0f);
}

TEST(KernelQuantize, Q4_0HandComputedBlocks) {
  // Block 0: the largest magnitude is -8, so d = -8 / -8 = 1 and
  // q = min(15, trunc(x + 8.5)). Block 1: it is +8, so d = -1 and
  // q = min(15, trunc(8.5 - x)).
  std::vector<float> x(64, 0.0f);
  x[0] = -8.0f;   // 0
  x[1] = 7.0f;    // 15
  x[2] = 7.4f;    // 15
  x[3] = -0.6f;   // 7
  x[4] = 0.5f;    // 9
  x[16] = 3.2f;   // 11 (high nibble of byte 0)
  x[17] = -3.0f;  // 5
  x[31] = 8.0f * 0.99f;  // 15
  x[32] = 8.0f;   // 0
  x[33] = -8.0f;  // trunc(16.5) = 16, clamped to 15
  x[48] = 2.0f;   // 6
  BlockQ4_0 b[2];
  ASSERT_TRUE(QuantizeRow(DType::kQ4_0, x.data(), 64, b).ok());
  EXPECT_EQ(b[0].d, 0x3c00);  // 1.0
  // Zeros quantise to 8 in both halves: 0x88.
  const uint8_t want0[16] = {0xb0, 0x5f, 0x8f, 0x87, 0x89, 0x88, 0x88, 0x88,
                             0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0xf8};
  EXPECT_EQ(std::memcmp(b[0].qs, want0, 16), 0);
  EXPECT_EQ(b[1].d, 0xbc00);  // -1.0
  const uint8_t want1[16] = {0x60, 0x8f, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
                             0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
  EXPECT_EQ(std::memcmp(b[1].qs, want1, 16), 0);
  std::vector<float> back(64);
  ASSERT_TRUE(DequantizeRow(DType::kQ4_0, b, 64, back.data()).ok());
  EXPECT_EQ(back[0], -8.0f);
  EXPECT_EQ(back[1], 7.0f);
  EXPECT_EQ(back[16], 3.0f);
  EXPECT_EQ(back[32], 8.0f);
  EXPECT_EQ(back[33], -7.0f);  // the clamp costs one step
  EXPECT_EQ(back[48], 2.0f);
}

// |x - dequant(quant(x))| is at most half a step plus the fp16 rounding of
// the scale times the largest q (Q8_0: 127 * 2^-11 d < 0.07 d); Q4_0 can
// lose a whole step where x = -max is clamped from 16 to 15.
TEST(KernelQuantize, RoundTripWithinOneStep) {
  std::mt19937 rng(7);
  const int64_t cols = 32 * 40;
  const std::vector<float> x = RandomVector(rng, cols, 3.0f);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    std::vector<uint8_t> q(static_cast<size_t>(*RowBytes(dtype, cols)));
    std::vector<float> back(static_cast<size_t>(cols));
    ASSERT_TRUE(QuantizeRow(dtype, x.data(), cols, q.data()).ok());
    ASSERT_TRUE(DequantizeRow(dtype, q.data(), cols, back.data()).ok());
    for (int64_t b = 0; b < cols / 32; ++b) {
      float amax = 0.0f;
      for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float step = dtype == DType::kQ8_0 ? amax / 127.0f : amax / 8.0f;
      const float bound = dtype == DType::kQ8_0 ? 0.57f * step : 1.01f * step;
      for (int64_t j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(x[b * 32 + j] - back[b * 32 + j]), bound) << DTypeName(dtype) << " element " << b * 32 + j;
      }
    }
  }
}

TEST(KernelQuantize, RejectsRaggedQuantisedRows) {
  std::vector<float> x(40, 1.0f);
  std::vector<uint8_t> out(100);
  EXPECT_EQ(QuantizeRow(DType::kQ8_0, x.data(), 40, out.data()).code(), Code::kInvalidArgument);
  EXPECT_EQ(DequantizeRow(DType::kQ4_0, out.data(), 40, x.data()).code(), Code::kInvalidArgument);
  EXPECT_TRUE(QuantizeRow(DType::kF16, x.data(), 40, out.data()).ok());
}

// ---- MatMul --------------------------------------------------------------

struct MatMulCase {
  DType dtype;
  int64_t rows;
  int64_t cols;
  int64_t n;
};

// Weights stored in `dtype` and their exact dequantised values.
struct TestWeights {
  std::vector<uint8_t> stored;
  std::vector<float> dequant;  // rows x cols
  WeightView view;
};

TestWeights MakeWeights(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols) {
  TestWeights t;
  const int64_t row_bytes = *RowBytes(dtype, cols);
  t.stored.resize(static_cast<size_t>(rows * row_bytes));
  t.dequant.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> w = RandomVector(rng, cols, 0.5f);
    EXPECT_TRUE(QuantizeRow(dtype, w.data(), cols, t.stored.data() + r * row_bytes).ok());
    EXPECT_TRUE(DequantizeRow(dtype, t.stored.data() + r * row_bytes, cols, t.dequant.data() + r * cols).ok());
  }
  t.view = WeightView{dtype, t.stored.data(), rows, cols};
  return t;
}

// Error bound of one output against sum_k w[k] * x[k] in double:
//  - float accumulation: rounding errors of a sum of `cols` products grow
//    like sqrt(cols) * 2^-24 * sum |w x| in practice; 1e-5 * sum |w x| is
//    over 4x that at cols = 2048 and still far below one product of the sum
//    (a wrong or missing element would be off by about sum |w x| / cols);
//  - quantised weights: activations are rounded to int8 per 32-block with
//    step d_b = max_b |x| / 127, each by at most d_b / 2, so the sum moves by
//    at most sum_b d_b / 2 * sum_{k in b} |w_k|.
double Tolerance(DType dtype, const float* w, const float* x, int64_t cols) {
  double abs_sum = 0.0;
  for (int64_t k = 0; k < cols; ++k) abs_sum += std::fabs(static_cast<double>(w[k]) * x[k]);
  double tol = 1e-5 * abs_sum + 1e-6;
  if (dtype == DType::kQ8_0 || dtype == DType::kQ4_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      double amax = 0.0;
      double wsum = 0.0;
      for (int64_t j = 0; j < 32; ++j) {
        amax = std::max(amax, std::fabs(static_cast<double>(x[b * 32 + j])));
        wsum += std::fabs(w[b * 32 + j]);
      }
      tol += amax / 127.0 / 2.0 * wsum;
    }
  }
  return tol;
}

// The activations a quantised MatMul actually multiplies (matmul.h): per
// 32-block, d = max|x| / 127 and q = round-half-even(x * (127 / max|x|)).
std::vector<double> QuantizedActivations(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d = amax / 127.0f;
    for (size_t j = 0; j < 32; ++j) out[b * 32 + j] = static_cast<double>(d) * std::nearbyint(x[b * 32 + j] * id);
  }
  return out;
}

class KernelMatMul : public IsaTest {};

TEST_P(KernelMatMul, MatchesDoubleReferenceOnEveryDtypeAndShape) {
  std::mt19937 rng(42);
  const int64_t float_cols[] = {1, 13, 100, 257};
  const int64_t quant_cols[] = {32, 96, 544};
  const int64_t row_counts[] = {1, 5, 37, 130};
  const int64_t ns[] = {1, 7, 64};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const bool quant = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
    for (int64_t cols : quant ? std::vector<int64_t>(std::begin(quant_cols), std::end(quant_cols))
                              : std::vector<int64_t>(std::begin(float_cols), std::end(float_cols))) {
      for (int64_t rows : row_counts) {
        const TestWeights w = MakeWeights(rng, dtype, rows, cols);
        for (int64_t n : ns) {
          std::vector<float> x = RandomVector(rng, n * cols);
          if (cols > 3) x[3] = 9.0f;  // an outlier widens one block's step
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          MatMul(w.view, x.data(), n, y.data());
          const std::vector<double> xq = quant ? QuantizedActivations(x) : std::vector<double>(x.begin(), x.end());
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t r = 0; r < rows; ++r) {
              const float* wr = w.dequant.data() + r * cols;
              const float* xi = x.data() + i * cols;
              double ref = 0.0;
              double ref_q = 0.0;  // what the kernel computes, up to float rounding
              double abs_q = 0.0;
              for (int64_t k = 0; k < cols; ++k) {
                ref += static_cast<double>(wr[k]) * xi[k];
                ref_q += wr[k] * xq[i * cols + k];
                abs_q += std::fabs(wr[k] * xq[i * cols + k]);
              }
              ASSERT_NEAR(y[i * rows + r], ref, Tolerance(dtype, wr, xi, cols))
                  << DTypeName(dtype) << " rows=" << rows << " cols=" << cols << " n=" << n << " at [" << i
                  << "][" << r << "]";
              ASSERT_NEAR(y[i * rows + r], ref_q, 1e-5 * abs_q + 1e-6)
                  << DTypeName(dtype) << " rows=" << rows << " cols=" << cols << " n=" << n << " at [" << i
                  << "][" << r << "] against quantised activations";
            }
          }
        }
      }
    }
  }
}

// Large batches are processed in several passes over the weights, each
// with as many activation rows as fit in cache; every pass boundary and
// ragged last pass must still give every output.
TEST_P(KernelMatMul, LargeBatchesSpanSeveralPasses) {
  std::mt19937 rng(21);
  for (DType dtype : {DType::kF32, DType::kQ8_0}) {
    const int64_t cols = dtype == DType::kF32 ? 2100 : 32 * 420;  // 62 resp. 31 rows per pass
    const int64_t rows = 9;
    const int64_t n = 131;
    const TestWeights w = MakeWeights(rng, dtype, rows, cols);
    const std::vector<float> x = RandomVector(rng, n * cols);
    std::vector<float> y(static_cast<size_t>(n * rows), NAN);
    MatMul(w.view, x.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = w.dequant.data() + r * cols;
        const float* xi = x.data() + i * cols;
        double ref = 0.0;
        for (int64_t k = 0; k < cols; ++k) ref += static_cast<double>(wr[k]) * xi[k];
        ASSERT_NEAR(y[i * rows + r], ref, Tolerance(dtype, wr, xi, cols)) << DTypeName(dtype) << " [" << i << "][" << r << "]";
      }
    }
  }
}

// Every path quantises activations bit-identically and sums integers
// exactly, so it may differ from the scalar path only by float rounding.
TEST_P(KernelMatMul, AgreesWithScalarPath) {
  std::mt19937 rng(3);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const int64_t rows = 67;
    const int64_t cols = 32 * 23;
    const int64_t n = 9;
    const TestWeights w = MakeWeights(rng, dtype, rows, cols);
    const std::vector<float> x = RandomVector(rng, n * cols);
    std::vector<float> y(static_cast<size_t>(n * rows));
    std::vector<float> y_scalar(static_cast<size_t>(n * rows));
    MatMul(w.view, x.data(), n, y.data());
    ASSERT_TRUE(TEST_ForceIsa(Isa::kScalar).ok());
    MatMul(w.view, x.data(), n, y_scalar.data());
    ASSERT_TRUE(TEST_ForceIsa(GetParam()).ok());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        double abs_sum = 0.0;
        for (int64_t k = 0; k < cols; ++k) abs_sum += std::fabs(w.dequant[r * cols + k] * x[i * cols + k]);
        // 1.01: quantised activations exceed |x| by at most half a step.
        ASSERT_NEAR(y[i * rows + r], y_scalar[i * rows + r], 2e-5 * 1.01 * abs_sum)
            << DTypeName(dtype) << " [" << i << "][" << r << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KernelMatMul, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512), IsaParamName);

TEST(KernelMatMulContract, CheckWeightViewRejectsBadShapes) {
  const float data[64] = {};
  EXPECT_TRUE(CheckWeightView({DType::kF32, data, 4, 16}).ok());
  EXPECT_EQ(CheckWeightView({DType::kQ8_0, data, 1, 48}).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckWeightView({DType::kF32, nullptr, 4, 16}).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckWeightView({DType::kF32, data, -1, 16}).code(), Code::kInvalidArgument);
}

TEST(KernelMatMulContract, AbortsOnInvalidWeight) {
  const float data[48] = {};
  float x[48] = {};
  float y[1];
  EXPECT_DEATH(MatMul({DType::kQ4_0, data, 1, 48}, x, 1, y), "invalid weight");
}

// ---- worker pool ---------------------------------------------------------

TEST(KernelThreads, ResultsDoNotDependOnThreadCount) {
  std::mt19937 rng(5);
  const TestWeights w = MakeWeights(rng, DType::kQ8_0, 301, 512);
  const std::vector<float> x = RandomVector(rng, 5 * 512);
  std::vector<float> want(5 * 301);
  SetThreads(1);
  EXPECT_EQ(Threads(), 1);
  MatMul(w.view, x.data(), 5, want.data());
  for (int threads : {2, 3, 2}) {
    SetThreads(threads);
    EXPECT_EQ(Threads(), threads);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> y(want.size(), NAN);
      MatMul(w.view, x.data(), 5, y.data());
      // Each output is computed by one thread in a fixed order: bit-equal.
      ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0) << threads << " threads";
    }
  }
  SetThreads(2);
}

// Callers on several threads share the pool (their calls run one after the
// other) and each quantises activations into its own scratch.
TEST(KernelThreads, ConcurrentCallersGetTheirOwnResults) {
  SetThreads(2);
  std::mt19937 rng(6);
  struct Job {
    TestWeights w;
    std::vector<float> x;
    std::vector<float> want;
  };
  std::vector<Job> jobs;
  for (int64_t cols : {256, 1024, 64}) {
    Job j{MakeWeights(rng, DType::kQ4_0, 97, cols), RandomVector(rng, 3 * cols), std::vector<float>(3 * 97)};
    MatMul(j.w.view, j.x.data(), 3, j.want.data());
    jobs.push_back(std::move(j));
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (const Job& j : jobs) {
    callers.emplace_back([&j, &mismatches] {
      std::vector<float> y(j.want.size());
      for (int rep = 0; rep < 50; ++rep) {
        MatMul(j.w.view, j.x.data(), 3, y.data());
        if (std::memcmp(y.data(), j.want.data(), y.size() * sizeof(float)) != 0) mismatches.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(KernelThreads, ParallelForRunsEveryTaskOnce) {
  SetThreads(2);
  for (int64_t tasks : {0, 1, 2, 5, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
    ParallelFor(tasks, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
    for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1) << t << " of " << tasks;
  }
}

// ---- element-wise --------------------------------------------------------

class KernelVectorOps : public IsaTest {};

// Relative tolerance of the element-wise kernels against double: a few
// roundings per element plus exp's ~2 ulp on the vector paths.
constexpr double kRel = 1e-5;

void ExpectNearRel(const std::vector<float>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (std::fabs(want[i]) + 1e-3 * scale) + 1e-30) << what << " element " << i;
  }
}

TEST_P(KernelVectorOps, DotAxpyAdd) {
  std::mt19937 rng(11);
  for (int64_t n : {1, 7, 16, 33, 64, 1000}) {
    const std::vector<float> a = RandomVector(rng, n);
    const std::vector<float> b = RandomVector(rng, n);
    double dot = 0.0;
    double abs_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      dot += static_cast<double>(a[i]) * b[i];
      abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    ASSERT_NEAR(Dot(a.data(), b.data(), n), dot, 1e-5 * abs_sum) << n;

    std::vector<float> y = b;
    Axpy(0.75f, a.data(), n, y.data());
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = b[i] + 0.75 * a[i];
    ExpectNearRel(y, want, kRel, "axpy");

    std::vector<float> sum(static_cast<size_t>(n) + 1, 123.0f);  // guard element after the end
    Add(a.data(), b.data(), n, sum.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], a[i] + b[i]);
    ASSERT_EQ(sum[n], 123.0f) << "Add wrote past the end";
  }
}

TEST_P(KernelVectorOps, RmsNorm) {
  std::mt19937 rng(12);
  for (int64_t n : {1, 15, 576, 1001}) {
    const std::vector<float> x = RandomVector(rng, n, 4.0f);
    const std::vector<float> weight = RandomVector(rng, n);
    double ss = 0.0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-6);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] * scale * weight[i];
    std::vector<float> y(static_cast<size_t>(n));
    RmsNorm(x.data(), weight.data(), n, 1e-6f, y.data());
    ExpectNearRel(y, want, kRel, "rmsnorm");
    std::vector<float> in_place = x;
    RmsNorm(in_place.data(), weight.data(), n, 1e-6f, in_place.data());
    ExpectNearRel(in_place, want, kRel, "rmsnorm in place");
  }
}

TEST_P(KernelVectorOps, SwiGlu) {
  std::mt19937 rng(13);
  for (int64_t n : {1, 9, 1536}) {
    std::vector<float> gate = RandomVector(rng, n, 5.0f);
    gate[0] = n > 1 ? -100.0f : 0.0f;
    if (n > 2) gate[1] = 100.0f;
    if (n > 3) gate[2] = 0.0f;
    const std::vector<float> up = RandomVector(rng, n);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
    std::vector<float> y(static_cast<size_t>(n));
    SwiGlu(gate.data(), up.data(), n, y.data());
    ExpectNearRel(y, want, kRel, "swiglu");
  }
}

TEST_P(KernelVectorOps, Softmax) {
  std::mt19937 rng(14);
  for (int64_t n : {1, 5, 16, 17, 1000}) {
    std::vector<float> x = RandomVector(rng, n, 8.0f);
    x[0] += 1000.0f;  // large logits must not overflow
    double max = -INFINITY;
    for (float v : x) max = std::max(max, static_cast<double>(v));
    double sum = 0.0;
    for (float v : x) sum += std::exp(v - max);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = std::exp(x[i] - max) / sum;
    Softmax(x.data(), n);
    ExpectNearRel(x, want, kRel, "softmax");
  }
  // Terms far below the maximum underflow to (nearly) zero, never NaN.
  std::vector<float> wide = {0.0f, -200.0f, -1e30f};
  Softmax(wide.data(), 3);
  EXPECT_NEAR(wide[0], 1.0f, 1e-6f);
  EXPECT_LT(wide[1], 1e-30f);
  EXPECT_LT(wide[2], 1e-30f);
}

TEST_P(KernelVectorOps, RopeNeoxMatchesRotateHalf) {
  std::mt19937 rng(15);
  for (int64_t head_dim : {2, 6, 64, 128}) {
    const int64_t heads = 3;
    const int64_t half = head_dim / 2;
    const double pos = 17.0;
    std::vector<float> cos(static_cast<size_t>(half));
    std::vector<float> sin(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(10000.0, -2.0 * i / head_dim);
      cos[i] = static_cast<float>(std::cos(pos * freq));
      sin[i] = static_cast<float>(std::sin(pos * freq));
    }
    std::vector<float> x = RandomVector(rng, heads * head_dim);
    // HF: q * cat(cos, cos) + rotate_half(q) * cat(sin, sin), rotate_half(q) = cat(-q2, q1).
    std::vector<double> want(x.size());
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < head_dim; ++j) {
        const int64_t i = j % half;
        const double rot = j < half ? -x[h * head_dim + j + half] : x[h * head_dim + j - half];
        want[h * head_dim + j] = x[h * head_dim + j] * static_cast<double>(cos[i]) + rot * sin[i];
      }
    }
    ApplyRopeNeox(x.data(), heads, head_dim, cos.data(), sin.data());
    ExpectNearRel(x, want, kRel, "rope");
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KernelVectorOps, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         IsaParamName);

TEST(KernelIsa, DetectsBestPathAndRefusesUnsupportedOnes) {
  const Isa best = DetectIsa();
  EXPECT_TRUE(IsaSupported(best));
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  EXPECT_EQ(ActiveIsa(), best);
  if (!IsaSupported(Isa::kAvx512)) {
    EXPECT_EQ(TEST_ForceIsa(Isa::kAvx512).code(), Code::kFailedPrecondition);
    EXPECT_EQ(ActiveIsa(), best);
  }
}

}  // namespace
}  // namespace flashroll::kernels
