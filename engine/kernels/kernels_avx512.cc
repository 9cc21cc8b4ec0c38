// The AVX-512 path of the CPU kernels (F, BW, VL, VNNI; FMA, F16C).
//
// Float-typed weights: 4 weight rows x 4 activation rows of 16-lane FMA
// accumulators, masked loads for the column tail. Quantised weights: one
// 32-element block per 256-bit register and VPDPBUSD (VNNI) for the integer
// dot products, 4 x 4 tiles. VPDPBUSD multiplies unsigned by signed bytes,
// so Q8_0 uses w + 128 (unsigned) against the signed activations and starts
// the sum at -128 * sum(x); Q4_0 uses the unsigned nibbles q (= w + 8) and
// starts at -8 * sum(x). sum(x) comes with the activations, so both
// corrections are exact and free.
//
// Built with AVX-512 flags (kernels.cmake); only cpu_isa.cc decides to call
// it. Everything here has internal linkage and uses no inline library
// functions, so no AVX-512 code can be merged into another path.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels::internal {
namespace {

constexpr int kR = 4;  // weight rows per tile
constexpr int kC = 4;  // activation rows per tile

using TileFn = void (*)(const MatMulArgs&, int64_t r, int64_t i);

// Tiles prefetch the rows of the next tile in step with their own: a tile's
// rows are only a few KiB, too short for the hardware stream prefetchers to
// ramp up before each row ends (without this, Q8_0 matrix-vector ran at 5.5
// instead of 9.5 GB/s on one core). Prefetching past the matrix is harmless.
void Prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// Runs the tile kernel Tile<R, C> for the (rows, acts) remainder sizes.
template <template <int, int> class Tile>
void RunTile(int rows, int acts, const MatMulArgs& a, int64_t r, int64_t i) {
  static constexpr TileFn kFns[kR][kC] = {
      {Tile<1, 1>::Run, Tile<1, 2>::Run, Tile<1, 3>::Run, Tile<1, 4>::Run},
      {Tile<2, 1>::Run, Tile<2, 2>::Run, Tile<2, 3>::Run, Tile<2, 4>::Run},
      {Tile<3, 1>::Run, Tile<3, 2>::Run, Tile<3, 3>::Run, Tile<3, 4>::Run},
      {Tile<4, 1>::Run, Tile<4, 2>::Run, Tile<4, 3>::Run, Tile<4, 4>::Run},
  };
  kFns[rows - 1][acts - 1](a, r, i);
}

// Weight rows [r0, r1) against all activation rows, tile by tile: the kR
// rows of a tile are read from memory once and reused from cache for every
// group of kC activation rows of a pass.
template <template <int, int> class Tile>
void MatMulRows(const MatMulArgs& a, int64_t r0, int64_t r1) {
  const int64_t pass = a.pass_rows;
  for (int64_t i0 = 0; i0 < a.n; i0 += pass) {
    const int64_t i1 = a.n - i0 < pass ? a.n : i0 + pass;
    for (int64_t r = r0; r < r1; r += kR) {
      const int rows = r1 - r < kR ? static_cast<int>(r1 - r) : kR;
      for (int64_t i = i0; i < i1; i += kC) {
        const int acts = i1 - i < kC ? static_cast<int>(i1 - i) : kC;
        RunTile<Tile>(rows, acts, a, r, i);
      }
    }
  }
}

// ---- float-typed weights -------------------------------------------------

struct LoadF32 {
  static constexpr int64_t kBytes = 4;
  static __m512 Full(const uint8_t* row, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k); }
  static __m512 Masked(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  }
};

struct LoadF16 {
  static constexpr int64_t kBytes = 2;
  static __m512 Full(const uint8_t* row, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k)));
  }
  static __m512 Masked(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k));
  }
};

struct LoadBf16 {
  static constexpr int64_t kBytes = 2;
  static __m512 Widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 Full(const uint8_t* row, int64_t k) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k)));
  }
  static __m512 Masked(const uint8_t* row, int64_t k, __mmask16 m) {
    return Widen(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k));
  }
};

template <typename Load>
struct FloatKernel {
  static constexpr int64_t kElemBytes = Load::kBytes;
  template <int R, int C>
  struct Tile {
    static void Run(const MatMulArgs& a, int64_t r, int64_t i) {
      const uint8_t* w[R];
      const float* x[C];
      for (int q = 0; q < R; ++q) w[q] = a.w + (r + q) * a.row_bytes;
      for (int c = 0; c < C; ++c) x[c] = static_cast<const float*>(a.x) + (i + c) * a.cols;
      __m512 acc[R][C];
      for (int q = 0; q < R; ++q)
        for (int c = 0; c < C; ++c) acc[q][c] = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= a.cols; k += 16) {
        __m512 xv[C];
        for (int c = 0; c < C; ++c) xv[c] = _mm512_loadu_ps(x[c] + k);
        for (int q = 0; q < R; ++q) {
          Prefetch(w[q] + R * a.row_bytes + k * kElemBytes);
          const __m512 wv = Load::Full(w[q], k);
          for (int c = 0; c < C; ++c) acc[q][c] = _mm512_fmadd_ps(wv, xv[c], acc[q][c]);
        }
      }
      if (k < a.cols) {
        const __mmask16 m = static_cast<__mmask16>((1u << (a.cols - k)) - 1);
        __m512 xv[C];
        for (int c = 0; c < C; ++c) xv[c] = _mm512_maskz_loadu_ps(m, x[c] + k);
        for (int q = 0; q < R; ++q) {
          const __m512 wv = Load::Masked(w[q], k, m);
          for (int c = 0; c < C; ++c) acc[q][c] = _mm512_fmadd_ps(wv, xv[c], acc[q][c]);
        }
      }
      for (int q = 0; q < R; ++q)
        for (int c = 0; c < C; ++c) a.y[(i + c) * a.rows + r + q] = _mm512_reduce_add_ps(acc[q][c]);
    }
  };
};

void MatMulF32(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<FloatKernel<LoadF32>::Tile>(a, r0, r1); }
void MatMulF16(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<FloatKernel<LoadF16>::Tile>(a, r0, r1); }
void MatMulBf16(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<FloatKernel<LoadBf16>::Tile>(a, r0, r1); }

// ---- quantised weights ---------------------------------------------------

// An fp16 scale in all 8 lanes: one broadcast and one conversion.
__m256 BroadcastHalf(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h))); }

// Sum of the 8 lanes of a float vector.
float HSum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, int C>
struct Q8Tile {
  static void Run(const MatMulArgs& a, int64_t r, int64_t i) {
    const int64_t nb = a.cols / kQuantBlock;
    const BlockQ8_0* w[R];
    const ActBlock* x[C];
    for (int q = 0; q < R; ++q) w[q] = reinterpret_cast<const BlockQ8_0*>(a.w + (r + q) * a.row_bytes);
    for (int c = 0; c < C; ++c) x[c] = static_cast<const ActBlock*>(a.x) + (i + c) * nb;
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256 acc[R][C];
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) acc[q][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xv[C];
      __m256i start[C];
      __m256 dx[C];
      for (int c = 0; c < C; ++c) {
        xv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c][b].qs));
        start[c] = _mm256_set1_epi32(-16 * x[c][b].sum);  // 8 lanes x -16 sum = -128 * sum(x)
        dx[c] = _mm256_set1_ps(x[c][b].d);
      }
      for (int q = 0; q < R; ++q) {
        Prefetch(reinterpret_cast<const uint8_t*>(w[q] + b) + R * a.row_bytes);
        // w + 128 as unsigned bytes: flipping the sign bit adds 128.
        const __m256i wu = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[q][b].qs)), bias);
        const __m256 dw = BroadcastHalf(w[q][b].d);
        for (int c = 0; c < C; ++c) {
          const __m256i dot = _mm256_dpbusd_epi32(start[c], wu, xv[c]);
          acc[q][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dx[c]), acc[q][c]);
        }
      }
    }
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) a.y[(i + c) * a.rows + r + q] = HSum256(acc[q][c]);
  }
};

template <int R, int C>
struct Q4Tile {
  static void Run(const MatMulArgs& a, int64_t r, int64_t i) {
    const int64_t nb = a.cols / kQuantBlock;
    const BlockQ4_0* w[R];
    const ActBlock* x[C];
    for (int q = 0; q < R; ++q) w[q] = reinterpret_cast<const BlockQ4_0*>(a.w + (r + q) * a.row_bytes);
    for (int c = 0; c < C; ++c) x[c] = static_cast<const ActBlock*>(a.x) + (i + c) * nb;
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i nibble_shift = _mm256_setr_epi64x(0, 0, 4, 4);
    __m256 acc[R][C];
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) acc[q][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xv[C];
      __m256i start[C];
      __m256 dx[C];
      for (int c = 0; c < C; ++c) {
        xv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c][b].qs));
        start[c] = _mm256_set1_epi32(-x[c][b].sum);  // 8 lanes x -sum = -8 * sum(x)
        dx[c] = _mm256_set1_ps(x[c][b].d);
      }
      for (int q = 0; q < R; ++q) {
        Prefetch(reinterpret_cast<const uint8_t*>(w[q] + b) + R * a.row_bytes);
        // Both halves get the 16 packed bytes (a plain load, no shuffle);
        // the upper half shifts right by 4 to bring up elements 16..31.
        const __m256i packed = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[q][b].qs)));
        const __m256i wv = _mm256_and_si256(_mm256_srlv_epi64(packed, nibble_shift), low);
        const __m256 dw = BroadcastHalf(w[q][b].d);
        for (int c = 0; c < C; ++c) {
          const __m256i dot = _mm256_dpbusd_epi32(start[c], wv, xv[c]);
          acc[q][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dx[c]), acc[q][c]);
        }
      }
    }
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) a.y[(i + c) * a.rows + r + q] = HSum256(acc[q][c]);
  }
};

void MatMulQ8(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<Q8Tile>(a, r0, r1); }
void MatMulQ4(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<Q4Tile>(a, r0, r1); }

void QuantizeAct(const float* x, int64_t cols, ActBlock* out) {
  for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * kQuantBlock);
    const __m512 v1 = _mm512_loadu_ps(x + b * kQuantBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    const __m512 scale = _mm512_set1_ps(id);
    // Rounds to nearest even (the default MXCSR mode), as the scalar path.
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, scale));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, scale));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtsepi32_epi8(q1));
    out[b].sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

// ---- element-wise --------------------------------------------------------

__mmask16 TailMask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1); }

// e^x to about 2 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by its degree-7
// Taylor polynomial (truncation error < 6e-9), 2^n through the exponent bits.
// Inputs are clamped to [-87.3, 88.3] so 2^n stays a normal float.
__m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : TailMask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  const __m512 va = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void Add(const float* a, const float* b, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  if (i < n) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(n - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float ss = _mm512_reduce_add_ps(acc);
  const __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps));
  for (i = 0; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), scale), _mm512_loadu_ps(weight + i)));
  }
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale), _mm512_maskz_loadu_ps(m, weight + i)));
  }
}

__m512 SiluMul(__m512 g, __m512 u) {
  const __m512 sig = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
  return _mm512_mul_ps(_mm512_mul_ps(g, sig), u);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, SiluMul(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, SiluMul(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 vmax = neg_inf;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : TailMask(n - i);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, m, x + i));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : TailMask(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max));
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    _mm512_mask_storeu_ps(x + i, m, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void RopeNeox(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* lo = x + h * head_dim;
    float* hi = lo + half;
    for (int64_t i = 0; i < half; i += 16) {
      const __mmask16 m = half - i >= 16 ? static_cast<__mmask16>(0xffff) : TailMask(half - i);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, lo + i);
      const __m512 x1 = _mm512_maskz_loadu_ps(m, hi + i);
      const __m512 c = _mm512_maskz_loadu_ps(m, cos + i);
      const __m512 s = _mm512_maskz_loadu_ps(m, sin + i);
      _mm512_mask_storeu_ps(lo + i, m, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
      _mm512_mask_storeu_ps(hi + i, m, _mm512_fmadd_ps(x1, c, _mm512_mul_ps(x0, s)));
    }
  }
}

// ---- paged attention -----------------------------------------------------

// Loads 16 keys/values elements of a KV row as f32 (bf16: widened exactly).
__m512 LoadKv16(const uint8_t* p, bool bf16) {
  if (bf16) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
}

// The 16 horizontal sums of v[0..15] as one register: lane j = sum of v[j].
// A transpose-and-add tree (45 shuffles and adds) instead of 16 separate
// horizontal sums; the order of additions is fixed.
__m512 SumEach16(__m512 v[16]) {
  __m512 x[8];
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  __m512 y[4];
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(x[2 * i]);
    const __m512d b = _mm512_castps_pd(x[2 * i + 1]);
    y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  __m512 z[2];
  for (int i = 0; i < 2; ++i) {
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xdd));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xdd));
}

// One split of attention for a group of query heads (kernel_table.h). Keys
// go 16 at a time (within a block): for each head of the group, the 16 q.k
// products are summed into one register of scores, the running state is
// rescaled once, and the values are accumulated into that head's output
// with one load and store of each accumulator per 16 keys. The order of
// every sum depends only on the key positions. head_dim % 16 == 0.
void AttendSplit(const AttendSplitArgs& a) {
  const int64_t hd = a.head_dim;
  const int64_t vecs = hd / 16;
  const int64_t elem = a.bf16 ? 2 : 4;
  const int64_t row_bytes = hd * elem;
  const int64_t group = a.group;
  for (int64_t g = 0; g < group; ++g) {
    a.m[g] = -1e30f;
    a.l[g] = 0;
    for (int64_t d = 0; d < hd; ++d) a.acc[g * hd + d] = 0;
  }
  alignas(64) float probs[16];
  for (int64_t key = a.key_begin; key < a.key_end;) {
    const int64_t block = a.block_table[key / a.block_size];
    const int64_t first = key % a.block_size;
    const int64_t in_block = a.block_size - first < a.key_end - key ? a.block_size - first : a.key_end - key;
    const int64_t count = in_block < 16 ? in_block : 16;
    const uint8_t* kb = a.k_base + block * a.half_block_bytes + (a.kv_head * a.block_size + first) * row_bytes;
    const uint8_t* vb = a.v_base + block * a.half_block_bytes + (a.kv_head * a.block_size + first) * row_bytes;
    const __mmask16 live = count >= 16 ? static_cast<__mmask16>(0xffff) : TailMask(count);
    for (int64_t g = 0; g < group; ++g) {
      const float* q = a.q + g * hd;
      __m512 part[16];
      for (int64_t j = 0; j < 16; ++j) {
        if (j >= count) {
          part[j] = _mm512_setzero_ps();
          continue;
        }
        const uint8_t* krow = kb + j * row_bytes;
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), LoadKv16(krow, a.bf16));
        for (int64_t v = 1; v < vecs; ++v) {
          acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + v * 16), LoadKv16(krow + v * 16 * elem, a.bf16), acc);
        }
        part[j] = acc;
      }
      const __m512 scores = _mm512_mul_ps(SumEach16(part), _mm512_set1_ps(a.scale));
      const float block_max = _mm512_mask_reduce_max_ps(live, scores);
      const float m_new = a.m[g] > block_max ? a.m[g] : block_max;
      const __m512 p = _mm512_maskz_mov_ps(live, Exp(_mm512_sub_ps(scores, _mm512_set1_ps(m_new))));
      const float corr = _mm512_cvtss_f32(Exp(_mm512_set1_ps(a.m[g] - m_new)));
      a.l[g] = a.l[g] * corr + _mm512_reduce_add_ps(p);
      a.m[g] = m_new;
      _mm512_store_ps(probs, p);
      const __m512 vc = _mm512_set1_ps(corr);
      float* out = a.acc + g * hd;
      for (int64_t v = 0; v < vecs; ++v) {
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(out + v * 16), vc);
        for (int64_t j = 0; j < count; ++j) {
          acc = _mm512_fmadd_ps(_mm512_set1_ps(probs[j]), LoadKv16(vb + j * row_bytes + v * 16 * elem, a.bf16), acc);
        }
        _mm512_storeu_ps(out + v * 16, acc);
      }
    }
    key += count;
  }
}

const KernelTable kTable = {
    MatMulF32,   MatMulF16, MatMulBf16, MatMulQ8, MatMulQ4, QuantizeAct, Dot,
    Axpy,        Add,       RmsNorm,    SwiGlu,   Softmax,  RopeNeox, AttendSplit,
};

}  // namespace

const KernelTable& Avx512KernelTable() { return kTable; }

}  // namespace flashroll::kernels::internal
