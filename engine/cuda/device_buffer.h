// DeviceBuffer: GPU memory owned RAII-style (cudaMalloc / cudaFree), and
// CudaCheck, which turns a CUDA error code into a Status naming the step.
//
// Thread safety: none; one owner.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "common/status.h"

namespace flashroll::engine::cuda {

inline Status CudaCheck(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` bytes (contents lost when it grows); ResourceExhausted
  // naming the size when the GPU has no room.
  Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return Status::Ok();
    Release();
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky out-of-memory error
      ptr_ = nullptr;
      return Status::ResourceExhausted("CUDA: the GPU has no room for " + std::to_string(bytes) + " more bytes");
    }
    bytes_ = bytes;
    return Status::Ok();
  }

  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void Release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace flashroll::engine::cuda
