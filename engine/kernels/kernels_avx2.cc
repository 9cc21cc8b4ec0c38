// The AVX2 path of the CPU kernels (AVX2, FMA, F16C).
//
// Float-typed weights: 4 weight rows x 2 activation rows of 8-lane FMA
// accumulators (AVX2 has 16 vector registers), scalar column tail.
// Quantised weights: one 32-element block per register; PMADDUBSW multiplies
// unsigned by signed bytes into saturating int16 pairs, so Q8_0 uses |w|
// against x with w's sign (|w| <= 128, |x| <= 127: pairs stay below 2^15),
// and Q4_0 the unsigned nibbles q against x, corrected by -8 * sum(x).
//
// Built with AVX2 flags (kernels.cmake); only cpu_isa.cc decides to call it.
// Everything here has internal linkage and uses no inline library functions,
// so no AVX2 code can be merged into the portable path.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels::internal {
namespace {

constexpr int kR = 4;  // weight rows per tile
constexpr int kC = 2;  // activation rows per tile

using TileFn = void (*)(const MatMulArgs&, int64_t r, int64_t i);

// Tiles prefetch the rows of the next tile in step with their own: a tile's
// rows are only a few KiB, too short for the hardware stream prefetchers to
// ramp up before each row ends, which halved matrix-vector bandwidth.
// Prefetching past the matrix is harmless.
void Prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

template <template <int, int> class Tile>
void RunTile(int rows, int acts, const MatMulArgs& a, int64_t r, int64_t i) {
  static constexpr TileFn kFns[kR][kC] = {
      {Tile<1, 1>::Run, Tile<1, 2>::Run},
      {Tile<2, 1>::Run, Tile<2, 2>::Run},
      {Tile<3, 1>::Run, Tile<3, 2>::Run},
      {Tile<4, 1>::Run, Tile<4, 2>::Run},
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

float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

int32_t HSumInt(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ---- float-typed weights -------------------------------------------------

struct LoadF32 {
  static constexpr int64_t kBytes = 4;
  static __m256 Vec(const uint8_t* row, int64_t k) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k); }
  static float One(const uint8_t* row, int64_t k) { return reinterpret_cast<const float*>(row)[k]; }
};

struct LoadF16 {
  static constexpr int64_t kBytes = 2;
  static __m256 Vec(const uint8_t* row, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k)));
  }
  static float One(const uint8_t* row, int64_t k) { return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[k]); }
};

struct LoadBf16 {
  static constexpr int64_t kBytes = 2;
  static __m256 Vec(const uint8_t* row, int64_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float One(const uint8_t* row, int64_t k) {
    const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[k]) << 16;
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
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
      __m256 acc[R][C];
      for (int q = 0; q < R; ++q)
        for (int c = 0; c < C; ++c) acc[q][c] = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 8 <= a.cols; k += 8) {
        __m256 xv[C];
        for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x[c] + k);
        for (int q = 0; q < R; ++q) {
          Prefetch(w[q] + R * a.row_bytes + k * kElemBytes);
          const __m256 wv = Load::Vec(w[q], k);
          for (int c = 0; c < C; ++c) acc[q][c] = _mm256_fmadd_ps(wv, xv[c], acc[q][c]);
        }
      }
      for (int q = 0; q < R; ++q) {
        for (int c = 0; c < C; ++c) {
          float sum = HSum(acc[q][c]);
          for (int64_t t = k; t < a.cols; ++t) sum += Load::One(w[q], t) * x[c][t];
          a.y[(i + c) * a.rows + r + q] = sum;
        }
      }
    }
  };
};

void MatMulF32(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<FloatKernel<LoadF32>::Tile>(a, r0, r1); }
void MatMulF16(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<FloatKernel<LoadF16>::Tile>(a, r0, r1); }
void MatMulBf16(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<FloatKernel<LoadBf16>::Tile>(a, r0, r1); }

// ---- quantised weights ---------------------------------------------------

// An fp16 scale in all 8 lanes: one broadcast and one conversion.
__m256 BroadcastHalf(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h))); }

template <int R, int C>
struct Q8Tile {
  static void Run(const MatMulArgs& a, int64_t r, int64_t i) {
    const int64_t nb = a.cols / kQuantBlock;
    const BlockQ8_0* w[R];
    const ActBlock* x[C];
    for (int q = 0; q < R; ++q) w[q] = reinterpret_cast<const BlockQ8_0*>(a.w + (r + q) * a.row_bytes);
    for (int c = 0; c < C; ++c) x[c] = static_cast<const ActBlock*>(a.x) + (i + c) * nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R][C];
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) acc[q][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xv[C];
      __m256 dx[C];
      for (int c = 0; c < C; ++c) {
        xv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c][b].qs));
        dx[c] = _mm256_set1_ps(x[c][b].d);
      }
      for (int q = 0; q < R; ++q) {
        Prefetch(reinterpret_cast<const uint8_t*>(w[q] + b) + R * a.row_bytes);
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[q][b].qs));
        const __m256i wabs = _mm256_sign_epi8(wv, wv);
        const __m256 dw = BroadcastHalf(w[q][b].d);
        for (int c = 0; c < C; ++c) {
          const __m256i pairs = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv[c], wv));
          const __m256i dot = _mm256_madd_epi16(pairs, ones);
          acc[q][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dx[c]), acc[q][c]);
        }
      }
    }
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) a.y[(i + c) * a.rows + r + q] = HSum(acc[q][c]);
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
    const __m256i ones = _mm256_set1_epi16(1);
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
          const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv[c]), ones), start[c]);
          acc[q][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dx[c]), acc[q][c]);
        }
      }
    }
    for (int q = 0; q < R; ++q)
      for (int c = 0; c < C; ++c) a.y[(i + c) * a.rows + r + q] = HSum(acc[q][c]);
  }
};

void MatMulQ8(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<Q8Tile>(a, r0, r1); }
void MatMulQ4(const MatMulArgs& a, int64_t r0, int64_t r1) { MatMulRows<Q4Tile>(a, r0, r1); }

void QuantizeAct(const float* x, int64_t cols, ActBlock* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(xb + 8 * j);
    const __m256 m01 = _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask));
    const __m256 m23 = _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask));
    const float amax = HMax(_mm256_max_ps(m01, m23));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    const __m256 scale = _mm256_set1_ps(id);
    __m256i q[4];
    // Rounds to nearest even (the default MXCSR mode), as the scalar path.
    for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], scale));
    out[b].sum = HSumInt(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    // The two packs interleave 128-bit lanes; the permute restores order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), _mm256_permutevar8x32_epi32(p, order));
  }
}

// ---- element-wise --------------------------------------------------------

// Lanes [0, left) set, for masked loads and stores of a tail.
__m256i TailMask(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// e^x to about 2 ulp; see kernels_avx512.cc for the method.
__m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    acc0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc0);
  }
  return HSum(_mm256_add_ps(acc0, acc1));
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  const __m256 va = _mm256_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
  }
}

void Add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(y + i, m, _mm256_add_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_maskload_ps(x + i, TailMask(n - i));
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  const __m256 scale = _mm256_set1_ps(1.0f / __builtin_sqrtf(HSum(acc) / static_cast<float>(n) + eps));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(y + i, m,
                        _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), scale), _mm256_maskload_ps(weight + i, m)));
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_maskload_ps(up + i, m)));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 vmax = neg_inf;
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
  }
  const __m256 max = _mm256_set1_ps(HMax(vmax));
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), max)), _mm256_castsi256_ps(m));
    vsum = _mm256_add_ps(vsum, e);
    _mm256_maskstore_ps(x + i, m, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / HSum(vsum));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
  }
}

void RopeNeox(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* lo = x + h * head_dim;
    float* hi = lo + half;
    for (int64_t i = 0; i < half; i += 8) {
      const __m256i m = TailMask(half - i);
      const __m256 x0 = _mm256_maskload_ps(lo + i, m);
      const __m256 x1 = _mm256_maskload_ps(hi + i, m);
      const __m256 c = _mm256_maskload_ps(cos + i, m);
      const __m256 s = _mm256_maskload_ps(sin + i, m);
      _mm256_maskstore_ps(lo + i, m, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
      _mm256_maskstore_ps(hi + i, m, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)));
    }
  }
}

const KernelTable kTable = {
    MatMulF32,   MatMulF16, MatMulBf16, MatMulQ8, MatMulQ4, QuantizeAct, Dot,
    Axpy,        Add,       RmsNorm,    SwiGlu,   Softmax,  RopeNeox, nullptr,
};

}  // namespace

const KernelTable& Avx2KernelTable() { return kTable; }

}  // namespace flashroll::kernels::internal
