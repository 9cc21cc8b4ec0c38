// The device entry points of a build without CUDA (nvcc was not found when
// it was configured): the CPU runs, `--device cuda` is refused up front.
#include "engine/device/device.h"
#include "engine/serving/backend.h"

namespace flashroll::engine {

bool BuiltWithCuda() { return false; }

Status CheckDevice(const DeviceSpec& device, int64_t /*bytes_needed*/) {
  if (!device.is_cuda()) return Status::Ok();
  return Status::FailedPrecondition(DeviceName(device) +
                                    ": this flashroll was built without CUDA (nvcc was not found at configure time)");
}

Result<std::unique_ptr<Backend>> NewCudaBackend(const Model& /*model*/, const DeviceSpec& device) {
  return CheckDevice(device, 0);
}

}  // namespace flashroll::engine
