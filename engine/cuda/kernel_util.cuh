// Device helpers the CUDA backend's kernel files share (kernels.cu,
// attention.cu): the warp, fixed-order warp sums and 16-byte loads.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace flashroll::engine::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ inline float Load(const float* p) { return *p; }
__device__ inline float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Sums v over the warp in one fixed butterfly order; every lane gets the
// same sum (each step adds the same two values on both lanes of a pair).
__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ inline void LoadEight(const float* p, float* out) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
  out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}

__device__ inline void LoadEight(const __nv_bfloat16* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

}  // namespace
}  // namespace flashroll::engine::cuda
