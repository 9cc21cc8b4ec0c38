// Device: where the engine runs a model — the CPU (the embedded default and
// the reference) or a CUDA GPU (engine/cuda/, built where nvcc exists).
//
// `--device cpu|cuda[:N]` on the command line and `model.device` in job
// configs name one. CheckDevice answers, before any weights load and within
// a second, whether the device can run a model of a given size: a build
// without CUDA, no CUDA driver, no GPU N, a GPU other than the one the CUDA
// code is built for (compute capability 9.0, Hopper) or too little free
// memory each give one line naming CUDA or the GPU and what is missing.
//
// Thread safety: pure functions, except CheckDevice, which may initialise
// the CUDA runtime (safe from any thread).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace flashroll::engine {

struct DeviceSpec {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int ordinal = 0;  // the CUDA device index (cuda:N)

  bool is_cuda() const { return kind == Kind::kCuda; }
  bool operator==(const DeviceSpec&) const = default;
};

// "cpu", "cuda" (GPU 0) or "cuda:N"; InvalidArgument naming the accepted
// forms otherwise.
Result<DeviceSpec> ParseDevice(const std::string& text);
// "cpu" or "cuda:N".
std::string DeviceName(const DeviceSpec& device);

// Whether the device can hold `bytes_needed` bytes (weights and KV pool) and
// run our kernels (device_memory.h computes the bytes a model needs). The CPU
// always can. FailedPrecondition otherwise, e.g.
// "cuda:0: this flashroll was built without CUDA (nvcc was not found at
// configure time)" or "cuda:0: the GPU (NVIDIA H200) has 1.2 GiB free, the
// model and its KV pool need 20.3 GiB".
Status CheckDevice(const DeviceSpec& device, int64_t bytes_needed);

// Whether this build carries the CUDA backend.
bool BuiltWithCuda();

}  // namespace flashroll::engine
