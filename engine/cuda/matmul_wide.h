// The bf16 matrix product for more than 16 rows (matmul_wide.cu), which
// kernels.cu's MatMul launches when it is given scratch for the split
// activations. Internal to engine/cuda/.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "engine/cuda/kernels.h"

namespace flashroll::engine::cuda {

// y[n][w.rows] = x[n][w.cols] . W^T (+ residual), every element bitwise as
// MmaMatMulKernel sums it; scratch holds n x w.cols x 4 bytes.
void WideMatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y, const float* residual, void* scratch,
                cudaStream_t stream);

}  // namespace flashroll::engine::cuda
