// Conversion of rows between f32 and the storage types of dtype.h.
//
// Quantisation follows ggml's reference quantisers, so rows written here are
// what llama.cpp would write for the same floats:
//   Q8_0: d = max|x| / 127, q = round-half-away(x / d).
//   Q4_0: m = the element of largest magnitude (sign kept), d = m / -8,
//         q = min(15, trunc(x / d + 8.5)).
// F16 and BF16 round to nearest even.
//
// Thread safety: pure functions over caller-owned memory.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/kernels/dtype.h"

namespace flashroll::kernels {

// Writes `cols` floats from `x` as one row of `dtype` to `out`, which must
// hold RowBytes(dtype, cols) bytes. Returns InvalidArgument when the column
// count does not suit the dtype (see RowBytes); nothing is written then.
Status QuantizeRow(DType dtype, const float* x, int64_t cols, void* out);

// Expands one stored row of `cols` elements to floats in `out`. Returns
// InvalidArgument when the column count does not suit the dtype.
Status DequantizeRow(DType dtype, const void* row, int64_t cols, float* out);

}  // namespace flashroll::kernels
