// What the bf16 matrix kernels share (kernels.cu's MmaMatMulKernel for up
// to 16 rows, matmul_wide.cu's WideMatMulKernel for more): the cut of K
// into slices, the hi + lo split of an f32 activation and the mma.sync
// step. Both kernels give every output element the same sequence of mma
// steps and the same slice sums, so which one ran never shows in a bit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace flashroll::engine::cuda {
namespace {

constexpr int kChunkCols = 32;     // columns a warp's mma pair covers: 4 lanes x 8
constexpr int kSliceCols = 512;    // the K a slice aims at
constexpr int kMaxSlices = 16;

struct GemmSplit {
  int slices = 1;
  int chunks_per_slice = 1;
};

// K's slices, a function of cols alone: chunks of 32 columns, as few per
// slice as keeps the slices at most 16 and about 512 columns each.
inline GemmSplit GemmSlices(int64_t cols) {
  const int64_t chunks = (cols + kChunkCols - 1) / kChunkCols;
  int64_t slices = (cols + kSliceCols - 1) / kSliceCols;
  slices = slices < 1 ? 1 : (slices > kMaxSlices ? kMaxSlices : slices);
  GemmSplit split;
  split.chunks_per_slice = static_cast<int>((chunks + slices - 1) / slices);
  split.slices = static_cast<int>((chunks + split.chunks_per_slice - 1) / split.chunks_per_slice);
  return split;
}

__device__ inline uint32_t PackPair(__nv_bfloat16 first, __nv_bfloat16 second) {
  // The lower k index sits in the low half, as in memory.
  return static_cast<uint32_t>(__bfloat16_as_ushort(first)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(second)) << 16);
}

// Splits two consecutive activations into their hi and lo bf16 pairs.
__device__ inline void SplitPair(float a, float b, uint32_t* hi, uint32_t* lo) {
  const __nv_bfloat16 ha = __float2bfloat16_rn(a);
  const __nv_bfloat16 hb = __float2bfloat16_rn(b);
  *hi = PackPair(ha, hb);
  *lo = PackPair(__float2bfloat16_rn(__fsub_rn(a, __bfloat162float(ha))),
                 __float2bfloat16_rn(__fsub_rn(b, __bfloat162float(hb))));
}

__device__ inline void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace
}  // namespace flashroll::engine::cuda
