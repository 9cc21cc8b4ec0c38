// DeviceMatMulBf16: one matrix product on the GPU by the CUDA backend's own
// bf16 matrix kernel (engine/cuda/kernels.h MatMul), with buffers of its
// own. The GPU tests check the kernel's batch invariance and accuracy
// through it; a build without CUDA refuses it as CheckDevice does.
//
// Thread safety: as the CUDA runtime (any thread; it syncs the device).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/device/device.h"

namespace flashroll::engine {

// y[n][rows] = x[n][cols] . W^T (+ residual[n][rows] when not empty); W is
// bf16 bits, [rows][cols], cols a multiple of 8. FailedPrecondition as
// CheckDevice without a usable GPU; InvalidArgument for sizes that disagree.
Result<std::vector<float>> DeviceMatMulBf16(const DeviceSpec& device, const std::vector<uint16_t>& w, int64_t rows,
                                            int64_t cols, const std::vector<float>& x, int64_t n,
                                            const std::vector<float>& residual = {});

}  // namespace flashroll::engine
