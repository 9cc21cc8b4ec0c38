// Matrix multiply of f32 activations by a stored weight matrix: the CPU
// engine's linear layers.
//
// Weights are row-major with one output feature per row (safetensors
// [out, in]; GGUF ne[0] = in), in any DType of dtype.h, and are typically
// mmapped. Accumulation is f32. For Q8_0/Q4_0 weights each activation row is
// first quantised to int8 per 32-block, as ggml does for its dot products
// (d = max|x| / 127 kept as f32, q = round-half-even(x * (127 / max|x|))),
// and the block products are exact integer sums (VNNI where present).
// n = 1 (decode) streams each weight row once; n > 1 (prefill, batched
// decode) works on tiles of 4 weight rows that are loaded once and reused
// for every activation row of a pass, a pass being as many activation rows
// as fit in half an L2 (64 rows of 2048 f32; all rows in most decode
// batches). Output rows are split over the threads of cpu_threads.h.
//
// Thread safety: MatMul may be called from any thread; calls share the
// worker pool and so run one after the other.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/kernels/dtype.h"

namespace flashroll::kernels {

// A weight matrix in memory the caller owns: rows x cols elements of dtype,
// row r at data + r * RowBytes(dtype, cols).
struct WeightView {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
};

// Returns OK when MatMul can use `w`: non-negative shape, data present when
// the shape is non-empty, and cols a multiple of 32 for quantised types;
// otherwise InvalidArgument naming the problem. Call it when weights load.
Status CheckWeightView(const WeightView& w);

// y[n][w.rows] = x[n][w.cols] . W^T. Precondition: CheckWeightView(w) is OK
// (violations abort with a message, since they are bugs in the caller);
// x and y do not overlap. n = 0 does nothing.
void MatMul(const WeightView& w, const float* x, int64_t n, float* y);

}  // namespace flashroll::kernels
