// The CUDA backend's entry point. The kernels land in the next commit; until
// then a CUDA build refuses the GPU here, after the device checks.
#include "engine/serving/backend.h"

namespace flashroll::engine {

Result<std::unique_ptr<Backend>> NewCudaBackend(const Model& /*model*/, const DeviceSpec& device) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  return Status::Unimplemented(DeviceName(device) + ": this build has no CUDA kernels yet");
}

}  // namespace flashroll::engine
