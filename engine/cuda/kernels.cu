#include "engine/cuda/kernels.h"

#include <cuda_bf16.h>

#include <cmath>

namespace flashroll::engine::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ float Load(const float* p) { return *p; }
__device__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Sums v over the warp in one fixed butterfly order; every lane gets the sum.
__device__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

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

// ---- MatMul ----

constexpr int kMatMulWarps = 8;  // output features per block
constexpr int kRowGroup = 4;     // activation rows sharing one pass over a weight row

__device__ void LoadEight(const float* p, float* out) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
  out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}

__device__ void LoadEight(const __nv_bfloat16* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

template <typename T>
__global__ void MatMulKernel(const T* __restrict__ w, const float* __restrict__ x, int64_t n, int64_t rows,
                             int64_t cols, float* __restrict__ y) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kMatMulWarps + warp;
  if (r >= rows) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRowGroup;
  const int64_t group = n - t0 < kRowGroup ? n - t0 : kRowGroup;
  const T* wr = w + r * cols;
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
      LoadEight(x + (t0 + t) * cols + c, xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[t] = __fmaf_rn(wv[j], xv[j], acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kRowGroup; ++t) {
    if (t >= group) break;
    const float sum = WarpSum(acc[t]);
    if (lane == 0) y[(t0 + t) * rows + r] = sum;
  }
}

// ---- Q/K/V: bias, per-head norm, RoPE, KV write ----

__device__ int64_t SlotOffset(const KvView& kv, int64_t row, int64_t kv_head) {
  const int64_t pos = kv.positions[row];
  const int64_t block = kv.tables[kv.table_offsets[row] + pos / kv.block_size];
  const int64_t slot = pos % kv.block_size;
  return ((block * kv.num_kv_heads + kv_head) * kv.block_size + slot) * kv.head_dim;
}

__global__ void QkvPostKernel(float* q, float* k, float* v, const float* q_bias, const float* k_bias,
                              const float* v_bias, const float* q_norm, const float* k_norm, float eps,
                              const float* rope, int64_t heads, KvView kv) {
  extern __shared__ float buf[];
  const int64_t t = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t hd = kv.head_dim;
  const int64_t kvh = kv.num_kv_heads;
  const int lane = threadIdx.x;
  float* vec;
  const float* bias;
  const float* norm;
  bool rotate = true;
  int64_t kv_head = -1;
  void* dest = nullptr;
  if (h < heads) {
    vec = q + (t * heads + h) * hd;
    bias = q_bias ? q_bias + h * hd : nullptr;
    norm = q_norm;
  } else if (h < heads + kvh) {
    kv_head = h - heads;
    vec = k + (t * kvh + kv_head) * hd;
    bias = k_bias ? k_bias + kv_head * hd : nullptr;
    norm = k_norm;
    dest = kv.keys;
  } else {
    kv_head = h - heads - kvh;
    vec = v + (t * kvh + kv_head) * hd;
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

// ---- Attention ----

template <int kHeadDim, typename T>
__global__ void AttentionKernel(const float* q, int64_t heads, float scale, KvView kv, float* out) {
  const int64_t t = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int lane = threadIdx.x;
  const int64_t kv_head = h / (heads / kv.num_kv_heads);
  __shared__ float qs[kHeadDim];
  for (int d = lane; d < kHeadDim; d += kWarp) qs[d] = q[(t * heads + h) * kHeadDim + d];
  __syncwarp();
  const T* keys = static_cast<const T*>(kv.keys);
  const T* values = static_cast<const T*>(kv.values);
  const int32_t* table = kv.tables + kv.table_offsets[t];
  const int64_t last = kv.positions[t];
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kHeadDim];
#pragma unroll
  for (int d = 0; d < kHeadDim; ++d) acc[d] = 0.0f;
  for (int64_t p = lane; p <= last; p += kWarp) {
    const int64_t block = table[p / kv.block_size];
    const int64_t base = ((block * kv.num_kv_heads + kv_head) * kv.block_size + p % kv.block_size) * kHeadDim;
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < kHeadDim; ++d) s = __fmaf_rn(qs[d], Load(keys + base + d), s);
    s = __fmul_rn(s, scale);
    const float new_m = fmaxf(m, s);
    const float correction = expf(m - new_m);
    const float weight = expf(s - new_m);
    l = __fadd_rn(__fmul_rn(l, correction), weight);
#pragma unroll
    for (int d = 0; d < kHeadDim; ++d) acc[d] = __fmaf_rn(weight, Load(values + base + d), __fmul_rn(acc[d], correction));
    m = new_m;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other_m = __shfl_xor_sync(kFullMask, m, offset);
    const float other_l = __shfl_xor_sync(kFullMask, l, offset);
    const float new_m = fmaxf(m, other_m);
    const float mine = m == -INFINITY ? 0.0f : expf(m - new_m);
    const float theirs = other_m == -INFINITY ? 0.0f : expf(other_m - new_m);
    l = __fadd_rn(__fmul_rn(l, mine), __fmul_rn(other_l, theirs));
#pragma unroll
    for (int d = 0; d < kHeadDim; ++d) {
      const float other = __shfl_xor_sync(kFullMask, acc[d], offset);
      acc[d] = __fadd_rn(__fmul_rn(acc[d], mine), __fmul_rn(other, theirs));
    }
    m = new_m;
  }
  float* o = out + (t * heads + h) * kHeadDim;
#pragma unroll
  for (int d = 0; d < kHeadDim; ++d) {
    if (d % kWarp == lane) o[d] = __fdiv_rn(acc[d], l);
  }
}

template <int kHeadDim>
void LaunchAttention(const float* q, int64_t n, int64_t heads, float scale, const KvView& kv, float* out,
                     cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads));
  if (kv.bf16) {
    AttentionKernel<kHeadDim, __nv_bfloat16><<<grid, kWarp, 0, stream>>>(q, heads, scale, kv, out);
  } else {
    AttentionKernel<kHeadDim, float><<<grid, kWarp, 0, stream>>>(q, heads, scale, kv, out);
  }
}

// ---- Element-wise ----

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t count, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void AddKernel(float* x, const float* y, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = __fadd_rn(x[i], y[i]);
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
  RmsNormKernel<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, rows, width, weight, eps, out);
}

void MatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n == 0 || w.rows == 0) return;
  const dim3 grid(Blocks(w.rows, kMatMulWarps), Blocks(n, kRowGroup));
  const int threads = kMatMulWarps * kWarp;
  if (w.bf16) {
    MatMulKernel<<<grid, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(w.data), x, n, w.rows, w.cols, y);
  } else {
    MatMulKernel<<<grid, threads, 0, stream>>>(static_cast<const float*>(w.data), x, n, w.rows, w.cols, y);
  }
}

void QkvPost(float* q, float* k, float* v, const float* q_bias, const float* k_bias, const float* v_bias,
             const float* q_norm, const float* k_norm, float eps, const float* rope, int64_t n, int64_t heads,
             const KvView& kv, cudaStream_t stream) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads + 2 * kv.num_kv_heads));
  const size_t shared = static_cast<size_t>(kv.head_dim) * sizeof(float);
  QkvPostKernel<<<grid, kWarp, shared, stream>>>(q, k, v, q_bias, k_bias, v_bias, q_norm, k_norm, eps, rope, heads,
                                                 kv);
}

bool AttentionSupports(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

void Attention(const float* q, int64_t n, int64_t heads, float scale, const KvView& kv, float* out,
               cudaStream_t stream) {
  if (n == 0) return;
  switch (kv.head_dim) {
    case 16: return LaunchAttention<16>(q, n, heads, scale, kv, out, stream);
    case 32: return LaunchAttention<32>(q, n, heads, scale, kv, out, stream);
    case 64: return LaunchAttention<64>(q, n, heads, scale, kv, out, stream);
    case 128: return LaunchAttention<128>(q, n, heads, scale, kv, out, stream);
    default: return;  // refused when the backend is made (AttentionSupports)
  }
}

void SwiGlu(const float* gate, const float* up, int64_t count, float* y, cudaStream_t stream) {
  if (count == 0) return;
  SwiGluKernel<<<Blocks(count, 256), 256, 0, stream>>>(gate, up, count, y);
}

void AddInPlace(float* x, const float* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  AddKernel<<<Blocks(count, 256), 256, 0, stream>>>(x, y, count);
}

}  // namespace flashroll::engine::cuda
