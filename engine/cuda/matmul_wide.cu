// The bf16 matrix product for more than 16 rows (kernels.h MatMul).
//
// MmaMatMulKernel gives each warp one K slice and splits every activation
// into hi + lo again in every warp that reads it, which at 64 rows spends
// more time converting and re-reading activations than multiplying. Here a
// first kernel splits each activation once (hi and lo bf16 arrays), and the
// product runs over shared-memory tiles of 64 weight rows x 32 or 64
// tokens, filled by cp.async three stages ahead. Each warp owns 32 rows x
// 32 tokens over the whole of K, walks the chunks of 32 columns in order
// with the same four mma steps per chunk as MmaMatMulKernel (hi, lo of
// columns 8q .. 8q + 3, then of 8q + 4 .. 8q + 7), and at the end of each
// of GemmSlices' slices adds the slice's sum to its running total in slice
// order. So every output element is the same sequence of roundings as in
// MmaMatMulKernel, whichever kernel and tile ran it.
#include "engine/cuda/matmul_wide.h"

#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/mma_util.cuh"

namespace flashroll::engine::cuda {
namespace {

constexpr int kWideRows = 64;    // weight rows a block covers: 2 warps of 32
constexpr int kStageChunks = 2;  // chunks of 32 columns a pipeline stage holds
constexpr int kStages = 3;

// hi[t][c], lo[t][c] of x[t][c], 8 columns a thread.
__global__ void SplitKernel(const float* x, int64_t eights, uint4* hi, uint4* lo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= eights) return;
  const float4 a = reinterpret_cast<const float4*>(x)[2 * i];
  const float4 b = reinterpret_cast<const float4*>(x)[2 * i + 1];
  uint4 h, l;
  SplitPair(a.x, a.y, &h.x, &l.x);
  SplitPair(a.z, a.w, &h.y, &l.y);
  SplitPair(b.x, b.y, &h.z, &l.z);
  SplitPair(b.z, b.w, &h.w, &l.w);
  hi[i] = h;
  lo[i] = l;
}

// 16 bytes from global to shared memory, zeros where !ok.
__device__ void CopyAsync16(uint4* shared, const void* global, bool ok) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(ok ? 16 : 0));
}

__device__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// kTokWarps warps along the tokens (32 each), 2 along the rows.
template <int kTokWarps>
__global__ void __launch_bounds__(2 * kTokWarps * kWarp)
    WideMatMulKernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ hi,
                     const __nv_bfloat16* __restrict__ lo, const float* residual, int64_t n, int64_t rows,
                     int64_t cols, int chunks_per_slice, float* y) {
  constexpr int kToks = 32 * kTokWarps;
  constexpr int kThreads = 2 * kTokWarps * kWarp;
  // A stage: [chunk][row][4 x 16 bytes] weights, then the same for hi and
  // lo by token.
  constexpr int kRowsQuads = kStageChunks * kWideRows * 4;
  constexpr int kToksQuads = kStageChunks * kToks * 4;
  constexpr int kStageQuads = kRowsQuads + 2 * kToksQuads;
  extern __shared__ uint4 stages[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int g = lane / 4;
  const int q = lane % 4;
  const int warp_row = (warp % 2) * 32;
  const int warp_tok = (warp / 2) * 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kWideRows;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kToks;
  const int64_t chunks = (cols + kChunkCols - 1) / kChunkCols;
  const int64_t stage_count = (chunks + kStageChunks - 1) / kStageChunks;

  const auto load = [&](int64_t stage, int buffer) {
    uint4* s = stages + buffer * kStageQuads;
    const int64_t chunk0 = stage * kStageChunks;
    for (int i = threadIdx.x; i < kRowsQuads; i += kThreads) {
      const int u = i / (kWideRows * 4);
      const int row = (i / 4) % kWideRows;
      const int64_t col = (chunk0 + u) * kChunkCols + (i % 4) * 8;
      const bool ok = row0 + row < rows && col < cols;
      CopyAsync16(s + i, ok ? w + (row0 + row) * cols + col : w, ok);
    }
    for (int i = threadIdx.x; i < kToksQuads; i += kThreads) {
      const int u = i / (kToks * 4);
      const int tok = (i / 4) % kToks;
      const int64_t col = (chunk0 + u) * kChunkCols + (i % 4) * 8;
      const bool ok = tok0 + tok < n && col < cols;
      const int64_t at = ok ? (tok0 + tok) * cols + col : 0;
      CopyAsync16(s + kRowsQuads + i, hi + at, ok);
      CopyAsync16(s + kRowsQuads + kToksQuads + i, lo + at, ok);
    }
  };

  float acc[2][4][4], total[2][4][4];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][t][i] = total[r][t][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stage_count) load(s, s);
    CommitCopies();
  }
  for (int64_t stage = 0; stage < stage_count; ++stage) {
    WaitCopies<kStages - 2>();
    __syncthreads();  // the stage is in, and every warp is done with the buffer refilled next
    if (stage + kStages - 1 < stage_count) load(stage + kStages - 1, static_cast<int>((stage + kStages - 1) % kStages));
    CommitCopies();
    const uint4* s = stages + (stage % kStages) * kStageQuads;
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      const int64_t chunk = stage * kStageChunks + u;
      if (chunk >= chunks) break;  // the same for the whole block
      uint4 a[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) a[r][h] = s[(u * kWideRows + warp_row + r * 16 + g + 8 * h) * 4 + q];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int tok = u * kToks + warp_tok + t * 8 + g;
        const uint4 bh = s[kRowsQuads + tok * 4 + q];
        const uint4 bl = s[kRowsQuads + kToksQuads + tok * 4 + q];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint4& w0 = a[r][0];
          const uint4& w8 = a[r][1];
          Mma(acc[r][t], w0.x, w8.x, w0.y, w8.y, bh.x, bh.y);
          Mma(acc[r][t], w0.x, w8.x, w0.y, w8.y, bl.x, bl.y);
          Mma(acc[r][t], w0.z, w8.z, w0.w, w8.w, bh.z, bh.w);
          Mma(acc[r][t], w0.z, w8.z, w0.w, w8.w, bl.z, bl.w);
        }
      }
      if ((chunk + 1) % chunks_per_slice == 0 || chunk + 1 == chunks) {
        // A slice ends: total = slice 0, then total + slice 1, ... as
        // MmaMatMulKernel adds its warps' partial sums.
        const bool first = chunk < chunks_per_slice;
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int t = 0; t < 4; ++t)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              total[r][t][i] = first ? acc[r][t][i] : __fadd_rn(total[r][t][i], acc[r][t][i]);
              acc[r][t][i] = 0.0f;
            }
      }
    }
  }
  WaitCopies<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row0 + warp_row + r * 16 + g + (i >= 2 ? 8 : 0);
        const int64_t tok = tok0 + warp_tok + t * 8 + 2 * q + (i & 1);
        if (row < rows && tok < n) {
          const int64_t at = tok * rows + row;
          y[at] = residual ? __fadd_rn(residual[at], total[r][t][i]) : total[r][t][i];
        }
      }
}

template <int kTokWarps>
constexpr size_t WideSharedBytes() {
  return static_cast<size_t>(kStages) * (kStageChunks * kWideRows * 4 + 2 * kStageChunks * 32 * kTokWarps * 4) *
         sizeof(uint4);
}

template <int kTokWarps>
void LaunchWide(const DeviceMatrix& w, const __nv_bfloat16* hi, const __nv_bfloat16* lo, const float* residual,
                int64_t n, float* y, cudaStream_t stream) {
  static const bool raised = [] {
    cudaFuncSetAttribute(WideMatMulKernel<kTokWarps>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(WideSharedBytes<kTokWarps>()));
    return true;
  }();
  (void)raised;
  const dim3 grid(static_cast<unsigned>((n + 32 * kTokWarps - 1) / (32 * kTokWarps)),
                  static_cast<unsigned>((w.rows + kWideRows - 1) / kWideRows));
  WideMatMulKernel<kTokWarps><<<grid, 2 * kTokWarps * kWarp, WideSharedBytes<kTokWarps>(), stream>>>(
      static_cast<const __nv_bfloat16*>(w.data), hi, lo, residual, n, w.rows, w.cols,
      GemmSlices(w.cols).chunks_per_slice, y);
}

int MultiprocessorCount() {
  static const int count = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
    return value > 0 ? value : 1;
  }();
  return count;
}

}  // namespace

void WideMatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y, const float* residual, void* scratch,
                cudaStream_t stream) {
  const int64_t eights = n * w.cols / 8;
  auto* hi = static_cast<__nv_bfloat16*>(scratch);
  __nv_bfloat16* lo = hi + n * w.cols;
  SplitKernel<<<static_cast<unsigned>((eights + 255) / 256), 256, 0, stream>>>(x, eights, reinterpret_cast<uint4*>(hi),
                                                                             reinterpret_cast<uint4*>(lo));
  // 64 tokens a block where that still gives two blocks a multiprocessor
  // (each weight tile read once per 64 tokens), else 32 (more blocks).
  const int64_t row_tiles = (w.rows + kWideRows - 1) / kWideRows;
  if (row_tiles * ((n + 63) / 64) >= 2 * MultiprocessorCount()) return LaunchWide<2>(w, hi, lo, residual, n, y, stream);
  LaunchWide<1>(w, hi, lo, residual, n, y, stream);
}

}  // namespace flashroll::engine::cuda
