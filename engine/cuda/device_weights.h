// DeviceWeights: a dense model's weights copied to the GPU, by the Hugging
// Face tensor names Model reads (model.cc). bf16 matrices stay bf16; every
// other type is dequantised to f32 on the host first; norms and biases are
// f32.
//
// Thread safety: immutable after Upload.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kernels.h"
#include "engine/models/model.h"

namespace flashroll::engine::cuda {

struct DeviceWeights {
  struct Layer {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* q_norm = nullptr;  // qk_norm families
    const float* k_norm = nullptr;
    const float* q_bias = nullptr;  // qkv_bias families
    const float* k_bias = nullptr;
    const float* v_bias = nullptr;
    DeviceMatrix q, k, v, o, gate, up, down;
  };

  // Copies `model`'s weights to the current GPU. Unimplemented for what the
  // kernels cannot run yet (routed experts, a head_dim other than 16, 32, 64
  // or 128); InvalidArgument naming the tensor whose width is not a multiple
  // of 8; ResourceExhausted when the GPU has no room.
  static Result<std::unique_ptr<DeviceWeights>> Upload(const Model& model);

  const Model* model = nullptr;
  DeviceMatrix embed, lm_head;
  const float* final_norm = nullptr;
  std::vector<Layer> layers;
  int64_t bytes = 0;  // GPU memory they take

 private:
  Result<DeviceMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols);
  Result<const float*> Vector(const std::string& name, int64_t n);
  Result<void*> Copy(const void* host, size_t size);

  std::vector<DeviceBuffer> buffers_;
};

}  // namespace flashroll::engine::cuda
