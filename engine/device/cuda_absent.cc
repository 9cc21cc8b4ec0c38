// The device entry points of a build without CUDA (nvcc was not found when
// it was configured): the CPU runs, `--device cuda` is refused up front.
#include "engine/device/device.h"
#include "engine/device/device_kernels.h"
#include "engine/serving/backend.h"

namespace flashroll::engine {

bool BuiltWithCuda() { return false; }

Status CheckDevice(const DeviceSpec& device, int64_t /*bytes_needed*/) {
  if (!device.is_cuda()) return Status::Ok();
  return Status::FailedPrecondition(DeviceName(device) +
                                    ": this flashroll was built without CUDA (nvcc was not found at configure time)");
}

Result<std::vector<float>> DeviceMatMulBf16(const DeviceSpec& device, const std::vector<uint16_t>& /*w*/,
                                            int64_t /*rows*/, int64_t /*cols*/, const std::vector<float>& /*x*/,
                                            int64_t /*n*/, const std::vector<float>& /*residual*/) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  return Status::Internal("unreachable: CheckDevice refuses CUDA in this build");
}

Result<std::vector<DeviceDrawOutcome>> DeviceDrawRows(const DeviceSpec& device, const std::vector<float>& /*logits*/,
                                                 int64_t /*vocab*/, const std::vector<SamplingParams>& /*params*/,
                                                 const std::vector<uint64_t>& /*choices*/,
                                                 const std::vector<uint64_t>& /*indices*/) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  return Status::Internal("unreachable: CheckDevice refuses CUDA in this build");
}

Result<int64_t> DeviceUploadedWeightBytes(const DeviceSpec& device, const Model& /*model*/) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  return Status::Internal("unreachable: CheckDevice refuses CUDA in this build");
}

Result<std::unique_ptr<Backend>> NewCudaBackend(const Model& /*model*/, const DeviceSpec& device) {
  return CheckDevice(device, 0);
}

}  // namespace flashroll::engine
