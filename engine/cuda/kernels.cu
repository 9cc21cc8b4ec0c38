#include "engine/cuda/kernels.h"

#include <cuda_bf16.h>

#include <cmath>

#include "engine/cuda/kernel_util.cuh"

namespace flashroll::engine::cuda {
namespace {

// ---- Embedding ----

template <typename T>
__global__ void EmbedKernel(const T* table, const int32_t* tokens, int64_t cols, float* x) {
  const int64_t t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(tokens[t]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) x[t * cols + c] = Load(row + c);
}

// ---- RMSNorm ----

constexpr int kNormThreads = 256;

__global__ void RmsNormKernel(const float* x, const int64_t* rows, int64_t width, const float* weight, float eps,
                              float* out) {
  const int64_t i = blockIdx.x;
  const float* xr = x + (rows ? rows[i] : i) * width;
  __shared__ float partial[kNormThreads];
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < width; c += kNormThreads) ss = __fmaf_rn(xr[c], xr[c], ss);
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int half = kNormThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  const float scale = 1.0f / sqrtf(partial[0] / static_cast<float>(width) + eps);
  for (int64_t c = threadIdx.x; c < width; c += kNormThreads) out[i * width + c] = xr[c] * scale * weight[c];
}

// RmsNormKernel for widths that are a multiple of 4: 16-byte accesses, each
// thread's squares summed in column order, the threads by a warp butterfly
// and the 8 warp sums in order.
__global__ void RmsNormKernel4(const float* x, const int64_t* rows, int64_t width, const float* weight, float eps,
                               float* out) {
  const int64_t i = blockIdx.x;
  const float4* xr = reinterpret_cast<const float4*>(x + (rows ? rows[i] : i) * width);
  const float4* wr = reinterpret_cast<const float4*>(weight);
  float4* o = reinterpret_cast<float4*>(out + i * width);
  const int64_t quads = width / 4;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < quads; c += kNormThreads) {
    const float4 v = xr[c];
    ss = __fmaf_rn(v.x, v.x, ss);
    ss = __fmaf_rn(v.y, v.y, ss);
    ss = __fmaf_rn(v.z, v.z, ss);
    ss = __fmaf_rn(v.w, v.w, ss);
  }
  ss = WarpSum(ss);
  __shared__ float warp_sums[kNormThreads / kWarp];
  if (threadIdx.x % kWarp == 0) warp_sums[threadIdx.x / kWarp] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / kWarp; ++w) total = __fadd_rn(total, warp_sums[w]);
  const float scale = 1.0f / sqrtf(total / static_cast<float>(width) + eps);
  for (int64_t c = threadIdx.x; c < quads; c += kNormThreads) {
    const float4 v = xr[c];
    const float4 w = wr[c];
    o[c] = make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z, v.w * scale * w.w);
  }
}

// ---- f32 MatMul (FMA) ----

constexpr int kMatMulWarps = 8;  // output features per block
constexpr int kRowGroup = 4;     // activation rows sharing one pass over a weight row

// kGrouped: blockIdx.y is a tile of ExpertTiles (at most kRowGroup slots of
// one expert), its weights that expert's [rows][cols] block, its x rows
// gathered through tiles.gather; blocks past tiles.count leave at once.
template <bool kGrouped>
__global__ void MatMulKernel(const float* __restrict__ w, const float* __restrict__ x, const float* residual, int64_t n,
                             int64_t rows, int64_t cols, float* y, ExpertTiles tiles) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kMatMulWarps + warp;
  if (r >= rows) return;
  int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRowGroup;
  int64_t end = n;
  const float* wr = w + r * cols;
  if constexpr (kGrouped) {
    if (static_cast<int>(blockIdx.y) >= *tiles.count) return;
    t0 = tiles.begin[blockIdx.y];
    end = tiles.end[blockIdx.y];
    wr += static_cast<int64_t>(tiles.expert[blockIdx.y]) * rows * cols;
  }
  const int64_t group = end - t0 < kRowGroup ? end - t0 : kRowGroup;
  const float* xr[kRowGroup];
#pragma unroll
  for (int t = 0; t < kRowGroup; ++t) {
    const int64_t slot = t < group ? t0 + t : t0;
    xr[t] = x + (kGrouped && tiles.gather ? tiles.gather[slot] : slot) * cols;
  }
  float acc[kRowGroup] = {};
  // Unrolled so that several 16-byte weight loads are in flight per lane;
  // the sums keep their order.
#pragma unroll 4
  for (int64_t c = lane * 8; c < cols; c += kWarp * 8) {
    float wv[8];
    LoadEight(wr + c, wv);
#pragma unroll
    for (int t = 0; t < kRowGroup; ++t) {
      if (t >= group) break;
      float xv[8];
      LoadEight(xr[t] + c, xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[t] = __fmaf_rn(wv[j], xv[j], acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kRowGroup; ++t) {
    if (t >= group) break;
    const float sum = WarpSum(acc[t]);
    const int64_t at = (t0 + t) * rows + r;
    if (lane == 0) y[at] = residual ? __fadd_rn(residual[at], sum) : sum;
  }
}

// ---- bf16 MatMul on the tensor cores (mma.sync m16n8k16, f32 accumulate) ----
//
// The weight matrix is the 16-row operand A, the activations the 8-column
// operand B, so one token reads the weights once at full width. A row's K is
// cut into GemmSlices(cols) slices, a function of cols alone; warp s of a
// block sums slice s of its 16*R output features for 8*T tokens, chunk by
// chunk of 32 columns in order, and the slices' partial sums are added
// 0, 1, 2, ... through shared memory. Each f32 activation enters as two bf16
// terms, hi = bf16(x) and lo = bf16(x - hi) (x to about 2^-17 relative), so
// the products keep nearly f32 accuracy on bf16 weights. R and T (the tile)
// follow the launch's row count, but an output element's sequence of mma
// steps does not: which rows share its tile never enters its sum.

constexpr int kChunkCols = 32;     // columns a warp's mma pair covers: 4 lanes x 8
constexpr int kSliceCols = 512;    // the K a slice aims at
constexpr int kMaxSlices = 16;

struct GemmSplit {
  int slices = 1;
  int chunks_per_slice = 1;
};

GemmSplit GemmSlices(int64_t cols) {
  const int64_t chunks = (cols + kChunkCols - 1) / kChunkCols;
  int64_t slices = (cols + kSliceCols - 1) / kSliceCols;
  slices = slices < 1 ? 1 : (slices > kMaxSlices ? kMaxSlices : slices);
  GemmSplit split;
  split.chunks_per_slice = static_cast<int>((chunks + slices - 1) / slices);
  split.slices = static_cast<int>((chunks + split.chunks_per_slice - 1) / split.chunks_per_slice);
  return split;
}

__device__ uint32_t PackPair(__nv_bfloat16 first, __nv_bfloat16 second) {
  // The lower k index sits in the low half, as in memory.
  return static_cast<uint32_t>(__bfloat16_as_ushort(first)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(second)) << 16);
}

// Splits two consecutive activations into their hi and lo bf16 pairs.
__device__ void SplitPair(float a, float b, uint32_t* hi, uint32_t* lo) {
  const __nv_bfloat16 ha = __float2bfloat16_rn(a);
  const __nv_bfloat16 hb = __float2bfloat16_rn(b);
  *hi = PackPair(ha, hb);
  *lo = PackPair(__float2bfloat16_rn(__fsub_rn(a, __bfloat162float(ha))),
                 __float2bfloat16_rn(__fsub_rn(b, __bfloat162float(hb))));
}

__device__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Lane (g, q) = (lane / 4, lane % 4) loads columns c + 8q .. c + 8q + 7 of
// weight rows g and g + 8 and of token g. mma k index 2q + j (j = 0, 1) is
// column c + 8q + j and k index 2q + 8 + j is column c + 8q + 2 + j, for A
// and B alike, so the permutation cancels in the sum; the second mma of the
// pair takes columns c + 8q + 4 .. 7 the same way.
// kGrouped: blockIdx.x is a tile of ExpertTiles (at most 8T slots of one
// expert) as in MatMulKernel; the sums are the same either way.
template <int R, int T, bool kGrouped>
__global__ void __launch_bounds__(kMaxSlices * kWarp)
    MmaMatMulKernel(const __nv_bfloat16* __restrict__ w, const float* __restrict__ x, const float* residual,
                    int64_t n, int64_t rows, int64_t cols, int chunks_per_slice, float* y, ExpertTiles tiles) {
  extern __shared__ float partial[];  // [slice][R][T][4][lane]
  const int slice = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int g = lane / 4;
  const int q = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 16 * R;
  int64_t tok0 = static_cast<int64_t>(blockIdx.x) * 8 * T;
  int64_t tok_end = n;
  if constexpr (kGrouped) {
    if (static_cast<int>(blockIdx.x) >= *tiles.count) return;  // the whole block
    tok0 = tiles.begin[blockIdx.x];
    tok_end = tiles.end[blockIdx.x];
    w += static_cast<int64_t>(tiles.expert[blockIdx.x]) * rows * cols;
  }
  const int64_t slice_begin = static_cast<int64_t>(slice) * chunks_per_slice * kChunkCols;
  int64_t slice_end = slice_begin + static_cast<int64_t>(chunks_per_slice) * kChunkCols;
  if (slice_end > cols) slice_end = cols;

  const __nv_bfloat16* wrow[R][2];
  bool wok[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + r * 16 + g + 8 * h;
      wok[r][h] = row < rows;
      wrow[r][h] = w + (wok[r][h] ? row : 0) * cols + 8 * q;
    }
  }
  const float* xrow[T];
  bool xok[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int64_t tok = tok0 + t * 8 + g;
    xok[t] = tok < tok_end;
    const int64_t src = !xok[t] ? 0 : kGrouped && tiles.gather ? tiles.gather[tok] : tok;
    xrow[t] = x + src * cols + 8 * q;
  }

  float acc[R][T][4];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][t][i] = 0.0f;

  // Weights for kAhead chunks are loaded before any is used, so several
  // 16-byte loads per lane are in flight while the previous chunks multiply.
  constexpr int kAhead = R == 1 ? 4 : 2;
  for (int64_t base = slice_begin; base < slice_end; base += kAhead * kChunkCols) {
    uint4 a[kAhead][R][2];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t col = base + u * kChunkCols + 8 * q;
      const bool in = col < slice_end;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          a[u][r][h] = in && wok[r][h] ? *reinterpret_cast<const uint4*>(wrow[r][h] + base + u * kChunkCols)
                                       : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t chunk = base + u * kChunkCols;
      if (chunk >= slice_end) break;  // the same for every lane of the warp
      const bool in = chunk + 8 * q < slice_end;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
        if (in && xok[t]) {
          x0 = *reinterpret_cast<const float4*>(xrow[t] + chunk);
          x1 = *reinterpret_cast<const float4*>(xrow[t] + chunk + 4);
        }
        uint32_t hi[4], lo[4];
        SplitPair(x0.x, x0.y, &hi[0], &lo[0]);
        SplitPair(x0.z, x0.w, &hi[1], &lo[1]);
        SplitPair(x1.x, x1.y, &hi[2], &lo[2]);
        SplitPair(x1.z, x1.w, &hi[3], &lo[3]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint4& w0 = a[u][r][0];
          const uint4& w8 = a[u][r][1];
          Mma(acc[r][t], w0.x, w8.x, w0.y, w8.y, hi[0], hi[1]);
          Mma(acc[r][t], w0.x, w8.x, w0.y, w8.y, lo[0], lo[1]);
          Mma(acc[r][t], w0.z, w8.z, w0.w, w8.w, hi[2], hi[3]);
          Mma(acc[r][t], w0.z, w8.z, w0.w, w8.w, lo[2], lo[3]);
        }
      }
    }
  }

  constexpr int kTile = R * T * 4 * kWarp;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[slice * kTile + ((r * T + t) * 4 + i) * kWarp + lane] = acc[r][t][i];
  __syncthreads();
  const int slices = blockDim.x / kWarp;
  for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
    float sum = partial[e];
    for (int s = 1; s < slices; ++s) sum = __fadd_rn(sum, partial[s * kTile + e]);
    const int l = e % kWarp;
    const int i = (e / kWarp) % 4;
    const int t = (e / (4 * kWarp)) % T;
    const int r = e / (4 * kWarp * T);
    const int64_t row = row0 + r * 16 + l / 4 + (i >= 2 ? 8 : 0);
    const int64_t tok = tok0 + t * 8 + (l % 4) * 2 + (i & 1);
    if (row < rows && tok < tok_end) {
      const int64_t at = tok * rows + row;
      y[at] = residual ? __fadd_rn(residual[at], sum) : sum;
    }
  }
}

// The dense product (tiles.count null) or the grouped one over `tiles`,
// whose grid covers tiles.max tiles; rows are per expert when grouped.
template <int R, int T>
void LaunchMma(const DeviceMatrix& w, int64_t rows, const float* x, const float* residual, int64_t n, float* y,
               const ExpertTiles& tiles, cudaStream_t stream) {
  const GemmSplit split = GemmSlices(w.cols);
  const size_t shared = static_cast<size_t>(split.slices) * R * T * 4 * kWarp * sizeof(float);
  const size_t most = kMaxSlices * R * T * 4 * kWarp * sizeof(float);
  static const bool raised = [most] {
    cudaFuncSetAttribute(MmaMatMulKernel<R, T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    cudaFuncSetAttribute(MmaMatMulKernel<R, T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    return true;
  }();
  (void)raised;
  const auto* weights = static_cast<const __nv_bfloat16*>(w.data);
  const unsigned row_tiles = static_cast<unsigned>((rows + 16 * R - 1) / (16 * R));
  if (tiles.count) {
    MmaMatMulKernel<R, T, true><<<dim3(static_cast<unsigned>(tiles.max), row_tiles), split.slices * kWarp, shared,
                                  stream>>>(weights, x, nullptr, 0, rows, w.cols, split.chunks_per_slice, y, tiles);
    return;
  }
  const dim3 grid(static_cast<unsigned>((n + 8 * T - 1) / (8 * T)), row_tiles);
  MmaMatMulKernel<R, T, false><<<grid, split.slices * kWarp, shared, stream>>>(weights, x, residual, n, rows, w.cols,
                                                                              split.chunks_per_slice, y, tiles);
}

// ---- Q/K/V: bias, per-head norm, RoPE, KV write ----

__device__ int64_t SlotOffset(const KvView& kv, int64_t row, int64_t kv_head) {
  const int64_t pos = kv.positions[row];
  const int64_t block = kv.tables[kv.table_offsets[row] + pos / kv.block_size];
  const int64_t slot = pos % kv.block_size;
  return ((block * kv.num_kv_heads + kv_head) * kv.block_size + slot) * kv.head_dim;
}

__global__ void QkvPostKernel(float* qkv, const float* q_bias, const float* k_bias, const float* v_bias,
                              const float* q_norm, const float* k_norm, float eps, const float* rope, int64_t heads,
                              KvView kv) {
  extern __shared__ float buf[];
  const int64_t t = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t hd = kv.head_dim;
  const int64_t kvh = kv.num_kv_heads;
  const int lane = threadIdx.x;
  const float* bias;
  const float* norm;
  bool rotate = true;
  int64_t kv_head = -1;
  void* dest = nullptr;
  // Row t holds its q heads, then its k heads, then its v heads.
  float* vec = qkv + (t * (heads + 2 * kvh) + h) * hd;
  if (h < heads) {
    bias = q_bias ? q_bias + h * hd : nullptr;
    norm = q_norm;
  } else if (h < heads + kvh) {
    kv_head = h - heads;
    bias = k_bias ? k_bias + kv_head * hd : nullptr;
    norm = k_norm;
    dest = kv.keys;
  } else {
    kv_head = h - heads - kvh;
    bias = v_bias ? v_bias + kv_head * hd : nullptr;
    norm = nullptr;
    rotate = false;
    dest = kv.values;
  }
  for (int64_t d = lane; d < hd; d += kWarp) buf[d] = bias ? __fadd_rn(vec[d], bias[d]) : vec[d];
  __syncwarp();
  if (norm) {
    float ss = 0.0f;
    for (int64_t d = lane; d < hd; d += kWarp) ss = __fmaf_rn(buf[d], buf[d], ss);
    const float scale = 1.0f / sqrtf(WarpSum(ss) / static_cast<float>(hd) + eps);
    for (int64_t d = lane; d < hd; d += kWarp) buf[d] = buf[d] * scale * norm[d];
    __syncwarp();
  }
  if (rotate) {
    const int64_t half = hd / 2;
    const float* cos = rope + t * hd;
    const float* sin = cos + half;
    for (int64_t i = lane; i < half; i += kWarp) {
      const float a = buf[i];
      const float b = buf[i + half];
      buf[i] = __fsub_rn(__fmul_rn(a, cos[i]), __fmul_rn(b, sin[i]));
      buf[i + half] = __fadd_rn(__fmul_rn(b, cos[i]), __fmul_rn(a, sin[i]));
    }
    __syncwarp();
  }
  for (int64_t d = lane; d < hd; d += kWarp) vec[d] = buf[d];
  if (!dest) return;
  const int64_t offset = SlotOffset(kv, t, kv_head);
  for (int64_t d = lane; d < hd; d += kWarp) {
    if (kv.bf16) {
      static_cast<__nv_bfloat16*>(dest)[offset + d] = __float2bfloat16_rn(buf[d]);
    } else {
      static_cast<float*>(dest)[offset + d] = buf[d];
    }
  }
}

// ---- Element-wise ----

__global__ void SwiGluKernel(const float* gate_up, int64_t count, int64_t width, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float* row = gate_up + (i / width) * 2 * width;
  const float gate = row[i % width];
  y[i] = gate / (1.0f + expf(-gate)) * row[width + i % width];
}

// ---- Sampling: the CPU sampler's draw (engine/sampling/sampler.cc) ----
//
// Every operation below is one IEEE double rounding, written as an
// intrinsic so that nvcc fuses nothing, in the order sampler.cc's Exp,
// Block64, BlockSum, BlockDraw and ArgMax use.

constexpr int kDrawThreads = 1024;
constexpr int64_t kDrawBlock = 64;

__device__ double ExpNonPositive(double x) {
  const double kLog2e = 1.4426950408889634074;
  const double kShift = 0x1.8p52;
  const double kLn2Hi = 6.93147180369123816490e-01;
  const double kLn2Lo = 1.90821492927058770002e-10;
  const double t = __dadd_rn(__dmul_rn(x, kLog2e), kShift);
  const double kd = __dsub_rn(t, kShift);
  const double r = __dsub_rn(__dsub_rn(x, __dmul_rn(kd, kLn2Hi)), __dmul_rn(kd, kLn2Lo));
  const double coefficients[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                                 1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                                 1.0 / 24.0,        1.0 / 6.0,        0.5,             1.0,
                                 1.0};
  double p = __dadd_rn(__dmul_rn(r, 1.0 / 6227020800.0), coefficients[0]);
#pragma unroll
  for (int i = 1; i < 13; ++i) p = __dadd_rn(__dmul_rn(p, r), coefficients[i]);
  const unsigned long long k =
      static_cast<unsigned long long>(__double_as_longlong(t)) - static_cast<unsigned long long>(__double_as_longlong(kShift));
  if (!(x >= -707.0)) return 0.0;
  return __longlong_as_double(static_cast<long long>(static_cast<unsigned long long>(__double_as_longlong(p)) + (k << 52)));
}

__device__ double DrawWeight(const float* x, int64_t i, int64_t vocab, float x_max, double inv_t) {
  if (i >= vocab) return 0.0;  // the last block's padding
  return ExpNonPositive(__dmul_rn(__dsub_rn(static_cast<double>(x[i]), static_cast<double>(x_max)), inv_t));
}

// Block64: lane l of 8 sums ids l, 8 + l, ..., 56 + l pairwise, then the
// lanes pairwise.
__device__ double DrawBlock(const float* x, int64_t begin, int64_t vocab, float x_max, double inv_t) {
  double lane[8];
#pragma unroll
  for (int l = 0; l < 8; ++l) {
    double v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = DrawWeight(x, begin + 8 * j + l, vocab, x_max, inv_t);
    lane[l] = __dadd_rn(__dadd_rn(__dadd_rn(v[0], v[1]), __dadd_rn(v[2], v[3])),
                        __dadd_rn(__dadd_rn(v[4], v[5]), __dadd_rn(v[6], v[7])));
  }
  return __dadd_rn(__dadd_rn(__dadd_rn(lane[0], lane[1]), __dadd_rn(lane[2], lane[3])),
                   __dadd_rn(__dadd_rn(lane[4], lane[5]), __dadd_rn(lane[6], lane[7])));
}

__global__ void __launch_bounds__(kDrawThreads)
    DrawKernel(const float* logits, int64_t vocab, const DrawParams* params, double* block_sums, DrawResult* out) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * vocab;
  const DrawParams p = params[row];
  const int64_t blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
  double* sums = block_sums + row * blocks;
  // The argmax, ties to the lower id, NaN never winning, 0 when nothing
  // beats -inf: each thread keeps its first maximum, then a tree of
  // (value, id) comparisons.
  __shared__ float best_value[kDrawThreads];
  __shared__ int64_t best_id[kDrawThreads];
  float bv = -INFINITY;
  int64_t bi = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kDrawThreads) {
    if (x[i] > bv) {
      bv = x[i];
      bi = i;
    }
  }
  best_value[threadIdx.x] = bv;
  best_id[threadIdx.x] = bi;
  __syncthreads();
  for (int half = kDrawThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float ov = best_value[threadIdx.x + half];
      const int64_t oi = best_id[threadIdx.x + half];
      if (ov > best_value[threadIdx.x] || (ov == best_value[threadIdx.x] && oi < best_id[threadIdx.x])) {
        best_value[threadIdx.x] = ov;
        best_id[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int64_t argmax = best_id[0];
  const float x_max = x[argmax];
  for (int64_t b = threadIdx.x; b < blocks; b += kDrawThreads) {
    sums[b] = DrawBlock(x, b * kDrawBlock, vocab, x_max, p.inv_t);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total = __dadd_rn(total, sums[b]);
  int64_t token = argmax;
  if (!p.greedy) {
    // BlockDraw: the block where the running sum passes u x total, then its
    // ids one at a time; should rounding disagree, its last positive id;
    // past every block, the row's last positive id; with none, the argmax.
    const double target = __dmul_rn(p.u, total);
    int64_t found = -1;
    double cum = 0.0;
    for (int64_t b = 0; b < blocks && found < 0; ++b) {
      const double next = __dadd_rn(cum, sums[b]);
      if (next > target) {
        const int64_t begin = b * kDrawBlock;
        const int64_t end = begin + kDrawBlock < vocab ? begin + kDrawBlock : vocab;
        double c = cum;
        for (int64_t i = begin; i < end && found < 0; ++i) {
          c = __dadd_rn(c, DrawWeight(x, i, vocab, x_max, p.inv_t));
          if (c > target) found = i;
        }
        for (int64_t i = end - 1; i >= begin && found < 0; --i) {
          if (DrawWeight(x, i, vocab, x_max, p.inv_t) > 0) found = i;
        }
        break;
      }
      cum = next;
    }
    for (int64_t i = vocab - 1; i >= 0 && found < 0; --i) {
      if (DrawWeight(x, i, vocab, x_max, p.inv_t) > 0) found = i;
    }
    if (found >= 0) token = found;
  }
  DrawResult r;
  r.token = static_cast<int32_t>(token);
  r.token_logit = x[token];
  r.max_logit = x_max;
  r.weight_sum = total;
  out[row] = r;
}

// ---- Mixture of experts: routing, grouping by expert, combining ----

constexpr int kMaxTopK = 32;

// Whether (v, id) comes before (best_v, best_id) in the router's order:
// higher probability first, ties to the lower id (model.cc's TopK).
__device__ bool Before(float v, int32_t id, float best_v, int32_t best_id) {
  return v > best_v || (v == best_v && id < best_id);
}

// One warp per row: softmax over the experts (max, exp, a strided sum and a
// fixed butterfly, times 1 / sum as kernels::Softmax), then the k experts
// one after another as the largest after the previous in Before's order, or
// the row's replayed ids; lane 0 writes the weights (summed in the chosen
// order, as model.cc), the ids, their ascending order and the routed copy.
__global__ void RouteKernel(const float* logits, int64_t experts, int k, bool norm_topk, const int64_t* replay_offsets,
                            const int32_t* replay_ids, int64_t moe_index, int64_t routed_stride, int32_t* chosen,
                            float* weights, int32_t* ascending, int32_t* routed) {
  extern __shared__ float probs[];  // [experts]
  __shared__ int32_t ids[kMaxTopK];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x;
  const float* row = logits + t * experts;
  float m = -INFINITY;
  for (int64_t e = lane; e < experts; e += kWarp) m = fmaxf(m, row[e]);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, offset));
  float sum = 0.0f;
  for (int64_t e = lane; e < experts; e += kWarp) {
    const float v = expf(__fsub_rn(row[e], m));
    probs[e] = v;
    sum = __fadd_rn(sum, v);
  }
  const float inv = __fdiv_rn(1.0f, WarpSum(sum));
  for (int64_t e = lane; e < experts; e += kWarp) probs[e] = __fmul_rn(probs[e], inv);
  __syncwarp();
  const int64_t replay = replay_offsets ? replay_offsets[t] : -1;
  if (replay >= 0) {
    if (lane < k) ids[lane] = replay_ids[replay + moe_index * k + lane];
  } else {
    float prev_v = INFINITY;
    int32_t prev_id = -1;
    for (int j = 0; j < k; ++j) {
      float best_v = -INFINITY;
      int32_t best_id = INT32_MAX;
      for (int64_t e = lane; e < experts; e += kWarp) {
        const float v = probs[e];
        const int32_t id = static_cast<int32_t>(e);
        if (Before(prev_v, prev_id, v, id) && (best_id == INT32_MAX || Before(v, id, best_v, best_id))) {
          best_v = v;
          best_id = id;
        }
      }
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        const float ov = __shfl_xor_sync(kFullMask, best_v, offset);
        const int32_t oi = __shfl_xor_sync(kFullMask, best_id, offset);
        if (oi != INT32_MAX && (best_id == INT32_MAX || Before(ov, oi, best_v, best_id))) {
          best_v = ov;
          best_id = oi;
        }
      }
      if (lane == 0) ids[j] = best_id;
      prev_v = best_v;
      prev_id = best_id;
    }
  }
  __syncwarp();
  if (lane != 0) return;
  float total = 0.0f;
  for (int j = 0; j < k; ++j) total = __fadd_rn(total, probs[ids[j]]);
  for (int j = 0; j < k; ++j) {
    const float p = probs[ids[j]];
    weights[t * k + j] = norm_topk ? __fdiv_rn(p, total) : p;
    chosen[t * k + j] = ids[j];
    routed[t * routed_stride + moe_index * k + j] = ids[j];
  }
  // The ascending order of the ids (distinct): the rank of each.
  for (int j = 0; j < k; ++j) {
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += ids[i] < ids[j] ? 1 : 0;
    ascending[t * k + rank] = j;
  }
}

constexpr int kGroupThreads = 1024;

// One block: pair p (row p / k, its (p % k)-th expert) gets slot
// offset[e] + (its rank among e's pairs in p order), the experts' slots
// one after another in ascending id; warp w counts and places expert
// w, w + 32, ... with ballots over 32 pairs at a time. Thread 0 cuts each
// expert's slots into tiles of at most `slots`.
__global__ void __launch_bounds__(kGroupThreads)
    GroupKernel(const int32_t* chosen, int64_t pairs, int64_t experts, int k, int slots, int32_t* pair_slot,
                int32_t* slot_row, int32_t* tile_expert, int32_t* tile_begin, int32_t* tile_end, int32_t* tile_count) {
  extern __shared__ int32_t first_slot[];  // [experts]: the count, then the offset
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const unsigned below = (1u << lane) - 1;
  for (int64_t e = warp; e < experts; e += kGroupThreads / kWarp) {
    int32_t count = 0;
    for (int64_t base = 0; base < pairs; base += kWarp) {
      const int64_t p = base + lane;
      count += __popc(__ballot_sync(kFullMask, p < pairs && chosen[p] == e));
    }
    if (lane == 0) first_slot[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t offset = 0, tiles = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const int32_t count = first_slot[e];
      first_slot[e] = offset;
      for (int32_t b = offset; b < offset + count; b += slots) {
        tile_expert[tiles] = static_cast<int32_t>(e);
        tile_begin[tiles] = b;
        tile_end[tiles] = b + slots < offset + count ? b + slots : offset + count;
        ++tiles;
      }
      offset += count;
    }
    *tile_count = tiles;
  }
  __syncthreads();
  for (int64_t e = warp; e < experts; e += kGroupThreads / kWarp) {
    int32_t next = first_slot[e];
    for (int64_t base = 0; base < pairs; base += kWarp) {
      const int64_t p = base + lane;
      const bool mine = p < pairs && chosen[p] == e;
      const unsigned ballot = __ballot_sync(kFullMask, mine);
      if (mine) {
        const int32_t slot = next + __popc(ballot & below);
        pair_slot[p] = slot;
        slot_row[slot] = static_cast<int32_t>(p / k);
      }
      next += __popc(ballot);
    }
  }
}

// Row t: x[t] += sum over its experts in ascending id of weight x output,
// plus sigmoid(shared_gate . h[t]) x shared[t] (qwen2_moe), the products
// accumulated in that order with one rounding each.
__global__ void CombineKernel(float* x, const float* expert_out, const int32_t* pair_slot, const float* weights,
                              const int32_t* ascending, int k, int64_t hidden, const float* shared,
                              const float* shared_gate, const float* h) {
  const int64_t t = blockIdx.x;
  __shared__ float partial[kNormThreads];
  float scale = 0.0f;
  if (shared) {
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < hidden; c += kNormThreads) dot = __fmaf_rn(shared_gate[c], h[t * hidden + c], dot);
    partial[threadIdx.x] = dot;
    __syncthreads();
    for (int half = kNormThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + half]);
      __syncthreads();
    }
    scale = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-partial[0])));
  }
  for (int64_t c = threadIdx.x; c < hidden; c += kNormThreads) {
    float acc = 0.0f;
    for (int i = 0; i < k; ++i) {
      const int j = ascending[t * k + i];
      acc = __fmaf_rn(weights[t * k + j], expert_out[static_cast<int64_t>(pair_slot[t * k + j]) * hidden + c], acc);
    }
    if (shared) acc = __fmaf_rn(scale, shared[t * hidden + c], acc);
    x[t * hidden + c] = __fadd_rn(x[t * hidden + c], acc);
  }
}

unsigned Blocks(int64_t count, int threads) { return static_cast<unsigned>((count + threads - 1) / threads); }

}  // namespace

void EmbedRows(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* x, cudaStream_t stream) {
  if (n == 0) return;
  if (table.bf16) {
    EmbedKernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(table.data), tokens,
                                                              table.cols, x);
  } else {
    EmbedKernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(static_cast<const float*>(table.data), tokens,
                                                              table.cols, x);
  }
}

void RmsNormRows(const float* x, const int64_t* rows, int64_t n, int64_t width, const float* weight, float eps,
                 float* out, cudaStream_t stream) {
  if (n == 0) return;
  if (width % 4 == 0) {
    RmsNormKernel4<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, rows, width, weight, eps, out);
  } else {
    RmsNormKernel<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, rows, width, weight, eps, out);
  }
}

void MatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y, cudaStream_t stream, const float* residual) {
  if (n == 0 || w.rows == 0) return;
  const ExpertTiles dense;
  if (w.bf16) {
    // The tile follows n; the sums do not (see MmaMatMulKernel).
    if (n <= 8) return LaunchMma<1, 1>(w, w.rows, x, residual, n, y, dense, stream);
    if (n <= 16) return LaunchMma<1, 2>(w, w.rows, x, residual, n, y, dense, stream);
    return LaunchMma<2, 4>(w, w.rows, x, residual, n, y, dense, stream);
  }
  const dim3 grid(Blocks(w.rows, kMatMulWarps), Blocks(n, kRowGroup));
  MatMulKernel<false><<<grid, kMatMulWarps * kWarp, 0, stream>>>(static_cast<const float*>(w.data), x, residual, n,
                                                                 w.rows, w.cols, y, dense);
}

int ExpertTileSlots(bool bf16, int64_t pairs, int64_t experts) {
  if (!bf16) return kRowGroup;
  const int64_t per_expert = (pairs + experts - 1) / experts;
  return per_expert <= 8 ? 8 : per_expert <= 16 ? 16 : 32;
}

int64_t MaxExpertTiles(int64_t pairs, int64_t experts, int tile_slots) {
  return pairs / tile_slots + (pairs < experts ? pairs : experts) + 1;
}

void ExpertMatMul(const DeviceMatrix& w, int64_t experts, const float* x, const ExpertTiles& tiles, float* y,
                  cudaStream_t stream) {
  if (tiles.max == 0 || w.rows == 0) return;
  const int64_t rows = w.rows / experts;
  if (w.bf16) {
    if (tiles.slots <= 8) return LaunchMma<1, 1>(w, rows, x, nullptr, 0, y, tiles, stream);
    if (tiles.slots <= 16) return LaunchMma<1, 2>(w, rows, x, nullptr, 0, y, tiles, stream);
    return LaunchMma<2, 4>(w, rows, x, nullptr, 0, y, tiles, stream);
  }
  const dim3 grid(Blocks(rows, kMatMulWarps), static_cast<unsigned>(tiles.max));
  MatMulKernel<true><<<grid, kMatMulWarps * kWarp, 0, stream>>>(static_cast<const float*>(w.data), x, nullptr, 0,
                                                                rows, w.cols, y, tiles);
}

void QkvPost(float* qkv, const float* q_bias, const float* k_bias, const float* v_bias, const float* q_norm,
             const float* k_norm, float eps, const float* rope, int64_t n, int64_t heads, const KvView& kv,
             cudaStream_t stream) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads + 2 * kv.num_kv_heads));
  const size_t shared = static_cast<size_t>(kv.head_dim) * sizeof(float);
  QkvPostKernel<<<grid, kWarp, shared, stream>>>(qkv, q_bias, k_bias, v_bias, q_norm, k_norm, eps, rope, heads, kv);
}

void DrawRows(const float* logits, int64_t n, int64_t vocab, const DrawParams* params, double* block_sums,
              DrawResult* out, cudaStream_t stream) {
  if (n == 0) return;
  DrawKernel<<<static_cast<unsigned>(n), kDrawThreads, 0, stream>>>(logits, vocab, params, block_sums, out);
}

bool RouteSupports(int64_t k) { return k >= 1 && k <= kMaxTopK; }

void RouteRows(const float* router_logits, int64_t n, int64_t experts, int64_t k, bool norm_topk,
               const int64_t* replay_offsets, const int32_t* replay_ids, int64_t moe_index, int64_t routed_stride,
               int32_t* chosen, float* weights, int32_t* ascending, int32_t* routed, cudaStream_t stream) {
  if (n == 0) return;
  RouteKernel<<<static_cast<unsigned>(n), kWarp, static_cast<size_t>(experts) * sizeof(float), stream>>>(
      router_logits, experts, static_cast<int>(k), norm_topk, replay_offsets, replay_ids, moe_index, routed_stride,
      chosen, weights, ascending, routed);
}

void GroupByExpert(const int32_t* chosen, int64_t n, int64_t k, int64_t experts, int32_t* pair_slot,
                   int32_t* slot_row, int32_t* tile_expert, int32_t* tile_begin, int32_t* tile_end,
                   int32_t* tile_count, int slots, cudaStream_t stream) {
  if (n == 0) return;
  GroupKernel<<<1, kGroupThreads, static_cast<size_t>(experts) * sizeof(int32_t), stream>>>(
      chosen, n * k, experts, static_cast<int>(k), slots, pair_slot, slot_row, tile_expert, tile_begin, tile_end,
      tile_count);
}

void CombineExperts(float* x, const float* expert_out, const int32_t* pair_slot, const float* weights,
                    const int32_t* ascending, int64_t n, int64_t k, int64_t hidden, const float* shared,
                    const float* shared_gate, const float* h, cudaStream_t stream) {
  if (n == 0) return;
  CombineKernel<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, expert_out, pair_slot, weights, ascending,
                                                                     static_cast<int>(k), hidden, shared, shared_gate,
                                                                     h);
}

void SwiGlu(const float* gate_up, int64_t n, int64_t width, float* y, cudaStream_t stream) {
  const int64_t count = n * width;
  if (count == 0) return;
  SwiGluKernel<<<Blocks(count, 256), 256, 0, stream>>>(gate_up, count, width, y);
}

}  // namespace flashroll::engine::cuda
