// The portable path of the CPU kernels: plain C++, the reference the vector
// paths are tested against. Rows are still processed four at a time so that
// a weight row stays in cache while every activation row uses it.
#include <cmath>
#include <cstdint>

#include "engine/kernels/half_bits.h"
#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels::internal {
namespace {

constexpr int64_t kRowTile = 4;

// Rows of the tile starting at r, clipped to r_end.
int64_t TileRows(int64_t r, int64_t r_end) { return r_end - r < kRowTile ? r_end - r : kRowTile; }

// Calls body(r, rr, i) for every tile of rr <= kRowTile weight rows from
// [r0, r1) and every activation row i, one pass of activation rows at a time.
template <typename Body>
void ForEachTile(const MatMulArgs& a, int64_t r0, int64_t r1, Body body) {
  const int64_t pass = a.pass_rows;
  for (int64_t i0 = 0; i0 < a.n; i0 += pass) {
    const int64_t i1 = a.n - i0 < pass ? a.n : i0 + pass;
    for (int64_t r = r0; r < r1; r += kRowTile) {
      for (int64_t i = i0; i < i1; ++i) body(r, TileRows(r, r1), i);
    }
  }
}

// Outputs of float-typed weight rows: sum_k load(w, k) * x[k].
template <typename Load>
void MatMulFloatRows(const MatMulArgs& a, int64_t r0, int64_t r1, Load load) {
  ForEachTile(a, r0, r1, [&](int64_t r, int64_t rr, int64_t i) {
    const float* xi = static_cast<const float*>(a.x) + i * a.cols;
    for (int64_t q = 0; q < rr; ++q) {
      const uint8_t* w = a.w + (r + q) * a.row_bytes;
      float acc = 0.0f;
      for (int64_t k = 0; k < a.cols; ++k) acc += load(w, k) * xi[k];
      a.y[i * a.rows + r + q] = acc;
    }
  });
}

void MatMulF32(const MatMulArgs& a, int64_t r0, int64_t r1) {
  MatMulFloatRows(a, r0, r1, [](const uint8_t* w, int64_t k) { return reinterpret_cast<const float*>(w)[k]; });
}

void MatMulF16(const MatMulArgs& a, int64_t r0, int64_t r1) {
  MatMulFloatRows(a, r0, r1, [](const uint8_t* w, int64_t k) {
    return HalfToFloat(reinterpret_cast<const uint16_t*>(w)[k]);
  });
}

void MatMulBf16(const MatMulArgs& a, int64_t r0, int64_t r1) {
  MatMulFloatRows(a, r0, r1, [](const uint8_t* w, int64_t k) {
    return Bf16ToFloat(reinterpret_cast<const uint16_t*>(w)[k]);
  });
}

// Integer dot product of one weight block with one activation block.
int32_t BlockDot(const BlockQ8_0& w, const ActBlock& x) {
  int32_t s = 0;
  for (int64_t j = 0; j < kQuantBlock; ++j) s += static_cast<int32_t>(w.qs[j]) * x.qs[j];
  return s;
}

int32_t BlockDot(const BlockQ4_0& w, const ActBlock& x) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  int32_t s = 0;
  for (int64_t j = 0; j < kHalf; ++j) {
    s += static_cast<int32_t>(w.qs[j] & 0x0f) * x.qs[j] + static_cast<int32_t>(w.qs[j] >> 4) * x.qs[j + kHalf];
  }
  return s - 8 * x.sum;  // nibbles are stored as q + 8
}

template <typename Block>
void MatMulQuantRows(const MatMulArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.cols / kQuantBlock;
  ForEachTile(a, r0, r1, [&](int64_t r, int64_t rr, int64_t i) {
    const ActBlock* xi = static_cast<const ActBlock*>(a.x) + i * nb;
    for (int64_t q = 0; q < rr; ++q) {
      const Block* w = reinterpret_cast<const Block*>(a.w + (r + q) * a.row_bytes);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        acc += HalfToFloat(w[b].d) * xi[b].d * static_cast<float>(BlockDot(w[b], xi[b]));
      }
      a.y[i * a.rows + r + q] = acc;
    }
  });
}

void QuantizeAct(const float* x, int64_t cols, ActBlock* out) {
  for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    int32_t sum = 0;
    for (int64_t j = 0; j < kQuantBlock; ++j) {
      const int8_t q = static_cast<int8_t>(std::nearbyint(xb[j] * id));
      out[b].qs[j] = q;
      sum += q;
    }
    out[b].sum = sum;
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void Add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void RopeNeox(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = xh[i];
      const float x1 = xh[i + half];
      xh[i] = x0 * cos[i] - x1 * sin[i];
      xh[i + half] = x1 * cos[i] + x0 * sin[i];
    }
  }
}

const KernelTable kTable = {
    MatMulF32,   MatMulF16, MatMulBf16, MatMulQuantRows<BlockQ8_0>, MatMulQuantRows<BlockQ4_0>,
    QuantizeAct, Dot,       Axpy,       Add,                        RmsNorm,
    SwiGlu,      Softmax,   RopeNeox, nullptr,
};

}  // namespace

const KernelTable& ScalarKernelTable() { return kTable; }

}  // namespace flashroll::kernels::internal
