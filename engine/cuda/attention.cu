// Paged attention (kernels.h Attention): one 8-warp block per (row, head).
//
// A row's context is cut into chunks of kChunk positions, a cut that
// depends on the row's own length alone; warp w takes chunks w, w + 8,
// w + 16, ... in order with an online softmax, and the 8 warps' partial
// (max, sum, output) merge in warp order. Within a chunk, lane j computes
// the score of position c * kChunk + j (its dot product summed d = 0, 1,
// ... in order), the chunk's weights are summed by a fixed butterfly, and
// lane j owns output dimensions kPer * j .. kPer * j + kPer - 1, adding the
// chunk's positions in order. Nothing depends on which other rows the
// launch holds or whether the row is a prefill or a decode step.
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/kernels.h"

namespace flashroll::engine::cuda {
namespace {

constexpr int kAttnWarps = 8;
constexpr int kChunk = kWarp;  // positions a warp takes at a time: one a lane

// kPer consecutive elements of a V row as f32 (kPer of 1, 2 or 4).
template <int kPer>
__device__ void LoadDims(const float* p, float* out) {
  if constexpr (kPer == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
  } else if constexpr (kPer == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    out[0] = v.x; out[1] = v.y;
  } else {
    out[0] = *p;
  }
}

template <int kPer>
__device__ void LoadDims(const __nv_bfloat16* p, float* out) {
  if constexpr (kPer == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
  } else if constexpr (kPer == 2) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
    out[0] = a.x; out[1] = a.y;
  } else {
    out[0] = __bfloat162float(*p);
  }
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kAttnWarps * kWarp)
    AttentionKernel(const float* q, int64_t q_stride, int64_t heads, float scale, KvView kv, float* out) {
  constexpr int kPer = kHeadDim >= kWarp ? kHeadDim / kWarp : 1;
  const int64_t t = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t kv_head = h / (heads / kv.num_kv_heads);
  __shared__ float qs[kHeadDim];
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) qs[d] = q[t * q_stride + h * kHeadDim + d];
  __syncthreads();
  const T* keys = static_cast<const T*>(kv.keys);
  const T* values = static_cast<const T*>(kv.values);
  const int32_t* table = kv.tables + kv.table_offsets[t];
  const int64_t len = kv.positions[t] + 1;
  const int64_t chunks = (len + kChunk - 1) / kChunk;
  const int d0 = lane * kPer;
  const bool owns = d0 < kHeadDim;  // head_dim 16: lanes 16 .. 31 own none
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.0f;
  for (int64_t c = warp; c < chunks; c += kAttnWarps) {
    const int64_t p = c * kChunk + lane;
    const bool valid = p < len;
    long long base = 0;
    float s = -INFINITY;
    if (valid) {
      const int64_t block = table[p / kv.block_size];
      base = ((block * kv.num_kv_heads + kv_head) * kv.block_size + p % kv.block_size) * kHeadDim;
      float dot = 0.0f;
#pragma unroll
      for (int d = 0; d < kHeadDim; d += 8) {
        float k8[8];
        LoadEight(keys + base + d, k8);
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = __fmaf_rn(qs[d + j], k8[j], dot);
      }
      s = __fmul_rn(dot, scale);
    }
    // Lane 0's position is in the context, so the chunk's max is finite.
    const float new_m = fmaxf(m, WarpMax(s));
    const float correction = expf(m - new_m);  // 0 for the first chunk (m = -inf)
    const float weight = valid ? expf(s - new_m) : 0.0f;
    l = __fadd_rn(__fmul_rn(l, correction), WarpSum(weight));
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = __fmul_rn(acc[i], correction);
    const int count = static_cast<int>(len - c * kChunk < kChunk ? len - c * kChunk : kChunk);
#pragma unroll 8
    for (int j = 0; j < count; ++j) {
      const float wj = __shfl_sync(kFullMask, weight, j);
      const long long bj = __shfl_sync(kFullMask, base, j);
      if (owns) {
        float v[kPer];
        LoadDims<kPer>(values + bj + d0, v);
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[i] = __fmaf_rn(wj, v[i], acc[i]);
      }
    }
    m = new_m;
  }
  // The warps' (max, sum, output) merge in warp order 0 .. 7, each scaled
  // by exp(m_w - M), M the largest m_w; a warp that had no chunk adds 0.
  __shared__ float warp_acc[kAttnWarps][kHeadDim];
  __shared__ float warp_m[kAttnWarps], warp_l[kAttnWarps];
  if (owns) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) warp_acc[warp][d0 + i] = acc[i];
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  __syncthreads();
  float big = -INFINITY;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w) big = fmaxf(big, warp_m[w]);
  float* o = out + (t * heads + h) * kHeadDim;
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float total = 0.0f, sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) {
      const float f = warp_m[w] == -INFINITY ? 0.0f : expf(warp_m[w] - big);
      total = __fmaf_rn(warp_l[w], f, total);
      sum = __fmaf_rn(warp_acc[w][d], f, sum);
    }
    o[d] = __fdiv_rn(sum, total);
  }
}

template <int kHeadDim>
void LaunchAttention(const float* q, int64_t q_stride, int64_t n, int64_t heads, float scale, const KvView& kv,
                     float* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads));
  constexpr int kThreads = kAttnWarps * kWarp;
  if (kv.bf16) {
    AttentionKernel<kHeadDim, __nv_bfloat16><<<grid, kThreads, 0, stream>>>(q, q_stride, heads, scale, kv, out);
  } else {
    AttentionKernel<kHeadDim, float><<<grid, kThreads, 0, stream>>>(q, q_stride, heads, scale, kv, out);
  }
}

}  // namespace

bool AttentionSupports(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

void Attention(const float* q, int64_t q_stride, int64_t n, int64_t heads, float scale, const KvView& kv, float* out,
               cudaStream_t stream) {
  if (n == 0) return;
  switch (kv.head_dim) {
    case 16: return LaunchAttention<16>(q, q_stride, n, heads, scale, kv, out, stream);
    case 32: return LaunchAttention<32>(q, q_stride, n, heads, scale, kv, out, stream);
    case 64: return LaunchAttention<64>(q, q_stride, n, heads, scale, kv, out, stream);
    case 128: return LaunchAttention<128>(q, q_stride, n, heads, scale, kv, out, stream);
    default: return;  // refused when the backend is made (AttentionSupports)
  }
}

}  // namespace flashroll::engine::cuda
