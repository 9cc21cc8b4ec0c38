// The device checks of a CUDA build: the CUDA runtime (linked statically)
// finds the driver, the GPU and its free memory, before any weights load.
#include <cstdio>

#include <cuda_runtime.h>

#include "engine/device/device.h"

namespace flashroll::engine {
namespace {

std::string GiB(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ll << 30));
  return buf;
}

}  // namespace

bool BuiltWithCuda() { return true; }

Status CheckDevice(const DeviceSpec& device, int64_t bytes_needed) {
  if (!device.is_cuda()) return Status::Ok();
  const std::string name = DeviceName(device);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return Status::FailedPrecondition(name + ": CUDA found no usable GPU (" + cudaGetErrorString(err) + ")");
  }
  if (device.ordinal >= count) {
    return Status::FailedPrecondition(name + ": CUDA sees " + std::to_string(count) + " GPU(s), so there is no GPU " +
                                      std::to_string(device.ordinal));
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device.ordinal);
  if (err != cudaSuccess) return Status::FailedPrecondition(name + ": CUDA: " + cudaGetErrorString(err));
  // The kernels are built for sm_90a alone (Hopper: H100, H200).
  if (prop.major != 9 || prop.minor != 0) {
    return Status::FailedPrecondition(name + ": the GPU (" + prop.name + ") has compute capability " +
                                      std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                                      "; this build's CUDA kernels need 9.0 (Hopper)");
  }
  if ((err = cudaSetDevice(device.ordinal)) != cudaSuccess) {
    return Status::FailedPrecondition(name + ": CUDA: " + cudaGetErrorString(err));
  }
  size_t free_bytes = 0, total_bytes = 0;
  if ((err = cudaMemGetInfo(&free_bytes, &total_bytes)) != cudaSuccess) {
    return Status::FailedPrecondition(name + ": CUDA: " + cudaGetErrorString(err));
  }
  if (bytes_needed > static_cast<int64_t>(free_bytes)) {
    return Status::FailedPrecondition(name + ": the GPU (" + prop.name + ") has " +
                                      GiB(static_cast<int64_t>(free_bytes)) + " free, the model and its KV pool need " +
                                      GiB(bytes_needed));
  }
  return Status::Ok();
}

}  // namespace flashroll::engine
