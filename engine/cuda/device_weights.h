// DeviceWeights: a model's weights copied to the GPU, by the Hugging Face
// tensor names Model reads (model.cc). bf16 matrices stay bf16; every other
// type is dequantised to f32 on the host first; norms, biases and the shared
// expert's gate vector are f32. A layer's q, k and v projections are stacked
// into one matrix, and so are gate and up, so each takes one launch (a row's
// sum does not depend on the other rows of its matrix). A MoE layer's
// experts are stacked into two matrices, every expert's gate and up rows one
// expert after another, and every expert's down rows.
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
    DeviceMatrix qkv;      // rows: q_dim of q, then kv_dim of k, then kv_dim of v
    DeviceMatrix o;
    // The dense FFN (dense layers), or a MoE layer's shared expert (when
    // shared_gate is set).
    DeviceMatrix gate_up;  // rows: intermediate of gate, then intermediate of up
    DeviceMatrix down;
    // MoE layers.
    bool moe = false;
    DeviceMatrix router;           // [experts][hidden]
    DeviceMatrix experts_gate_up;  // [experts][gate, then up: 2 x moe_intermediate][hidden]
    DeviceMatrix experts_down;     // [experts][hidden][moe_intermediate]
    const float* shared_gate = nullptr;  // [hidden] (qwen2_moe)
  };

  // Copies `model`'s weights to the current GPU. Unimplemented for what the
  // kernels cannot run (a head_dim other than 16, 32, 64 or 128, more than
  // 32 experts a token); InvalidArgument naming the tensor whose width is
  // not a multiple of 8; ResourceExhausted when the GPU has no room.
  static Result<std::unique_ptr<DeviceWeights>> Upload(const Model& model);

  const Model* model = nullptr;
  DeviceMatrix embed, lm_head;
  const float* final_norm = nullptr;
  std::vector<Layer> layers;
  int64_t bytes = 0;  // GPU memory they take

 private:
  struct Part {
    std::string name;
    int64_t rows;
  };
  // The named [rows][cols] tensors one under the other: bf16 when all are
  // bf16, else f32.
  Result<DeviceMatrix> Stacked(const std::vector<Part>& parts, int64_t cols);
  Result<DeviceMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols) {
    return Stacked({{name, rows}}, cols);
  }
  Result<const float*> Vector(const std::string& name, int64_t n);
  // A SwiGLU FFN of `width` under `prefix` into layer->gate_up and down.
  Status Mlp(const std::string& prefix, int64_t width, Layer* layer);
  Result<void*> Copy(const void* host, size_t size);

  std::vector<DeviceBuffer> buffers_;
};

}  // namespace flashroll::engine::cuda
