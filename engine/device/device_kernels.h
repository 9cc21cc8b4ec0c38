// The CUDA backend's kernels one call at a time, with buffers of their own:
// DeviceMatMulBf16 (kernels.h MatMul on bf16 weights) and DeviceDrawRows
// (the device draw, kernels.h DrawRows, finished as the engine does). The
// GPU tests check the matrix kernel's batch invariance and accuracy and the
// draws' equality with the CPU sampler through them; a build without CUDA
// refuses them as CheckDevice does. DeviceUploadedWeightBytes measures the
// weight upload.
//
// Thread safety: as the CUDA runtime (any thread; it syncs the device).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/device/device.h"
#include "engine/models/model.h"
#include "engine/sampling/sampler.h"

namespace flashroll::engine {

// y[n][rows] = x[n][cols] . W^T (+ residual[n][rows] when not empty); W is
// bf16 bits, [rows][cols], cols a multiple of 8. FailedPrecondition as
// CheckDevice without a usable GPU; InvalidArgument for sizes that disagree.
Result<std::vector<float>> DeviceMatMulBf16(const DeviceSpec& device, const std::vector<uint16_t>& w, int64_t rows,
                                            int64_t cols, const std::vector<float>& x, int64_t n,
                                            const std::vector<float>& residual = {});

// The token each row of logits [rows][vocab] draws on the GPU with
// params[row] as choice choices[row], token index indices[row]: what the
// engine samples there (Sampler::PlanDeviceDraw, then FinishDeviceDraw).
// InvalidArgument when a row's params are not Sampler::DrawsOnDevice's or
// the sizes disagree.
struct DeviceDrawOutcome {
  DeviceDraw draw;       // what the device computed
  SampledToken sampled;  // FinishDeviceDraw of it
};
Result<std::vector<DeviceDrawOutcome>> DeviceDrawRows(const DeviceSpec& device, const std::vector<float>& logits,
                                                      int64_t vocab, const std::vector<SamplingParams>& params,
                                                      const std::vector<uint64_t>& choices,
                                                      const std::vector<uint64_t>& indices);

// The bytes of GPU memory the CUDA backend's upload of `model`'s weights
// allocates (what CudaWeightBytes in device_memory.h predicts from the
// tensor index), the weights freed again. CheckDevice's errors without a
// usable GPU; the upload's own errors.
Result<int64_t> DeviceUploadedWeightBytes(const DeviceSpec& device, const Model& model);

}  // namespace flashroll::engine
