#include "engine/cuda/device_weights.h"

#include <cstring>

#include "engine/kernels/quantize.h"

namespace flashroll::engine::cuda {

Result<void*> DeviceWeights::Copy(const void* host, size_t size) {
  DeviceBuffer buffer;
  FR_RETURN_IF_ERROR(buffer.Reserve(size));
  FR_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(buffer.get(), host, size, cudaMemcpyHostToDevice), "copying weights"));
  void* ptr = buffer.get();
  buffers_.push_back(std::move(buffer));
  bytes += static_cast<int64_t>(size);
  return ptr;
}

Result<DeviceMatrix> DeviceWeights::Matrix(const std::string& name, int64_t rows, int64_t cols) {
  FR_ASSIGN_OR_RETURN(const WeightTensor* t, model->files().Get(name, {rows, cols}));
  if (cols % 8 != 0) {
    return Status::InvalidArgument(t->file + ": tensor '" + name + "': the CUDA kernels need a width that is a "
                                   "multiple of 8, got " + std::to_string(cols));
  }
  DeviceMatrix m;
  m.rows = rows;
  m.cols = cols;
  if (t->dtype == kernels::DType::kBF16) {
    m.bf16 = true;
    FR_ASSIGN_OR_RETURN(m.data, Copy(t->data, static_cast<size_t>(rows * cols) * 2));
    return m;
  }
  FR_ASSIGN_OR_RETURN(const int64_t row_bytes, kernels::RowBytes(t->dtype, cols));
  std::vector<float> f32(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    Status st = kernels::DequantizeRow(t->dtype, t->data + r * row_bytes, cols, &f32[r * cols]);
    if (!st.ok()) return st.Wrap(t->file + ": tensor '" + name + "'");
  }
  FR_ASSIGN_OR_RETURN(m.data, Copy(f32.data(), f32.size() * sizeof(float)));
  return m;
}

Result<const float*> DeviceWeights::Vector(const std::string& name, int64_t n) {
  FR_ASSIGN_OR_RETURN(const WeightTensor* t, model->files().Get(name, {n}));
  std::vector<float> f32(static_cast<size_t>(n));
  Status st = kernels::DequantizeRow(t->dtype, t->data, n, f32.data());
  if (!st.ok()) return st.Wrap(t->file + ": tensor '" + name + "'");
  FR_ASSIGN_OR_RETURN(void* ptr, Copy(f32.data(), f32.size() * sizeof(float)));
  return static_cast<const float*>(ptr);
}

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const Model& model) {
  const ModelConfig& c = model.config();
  if (!model.routing_shape().empty() || model.decoder_options().moe) {
    return Status::Unimplemented("the CUDA backend runs dense models so far; this " + c.architecture +
                                 " model has routed experts (run it with --device cpu)");
  }
  if (!AttentionSupports(c.head_dim)) {
    return Status::Unimplemented("the CUDA attention kernel takes head_dim 16, 32, 64 or 128; the model has " +
                                 std::to_string(c.head_dim));
  }
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return Status::InvalidArgument("num_attention_heads must be a multiple of num_key_value_heads");
  }
  std::unique_ptr<DeviceWeights> w(new DeviceWeights());
  w->model = &model;
  const DecoderOptions& o = model.decoder_options();
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  FR_ASSIGN_OR_RETURN(w->embed, w->Matrix("model.embed_tokens.weight", c.vocab_size, hidden));
  if (c.tie_word_embeddings) {
    w->lm_head = w->embed;
  } else {
    FR_ASSIGN_OR_RETURN(w->lm_head, w->Matrix("lm_head.weight", c.vocab_size, hidden));
  }
  FR_ASSIGN_OR_RETURN(w->final_norm, w->Vector("model.norm.weight", hidden));
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& layer = w->layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    FR_ASSIGN_OR_RETURN(layer.attn_norm, w->Vector(p + "input_layernorm.weight", hidden));
    FR_ASSIGN_OR_RETURN(layer.ffn_norm, w->Vector(p + "post_attention_layernorm.weight", hidden));
    FR_ASSIGN_OR_RETURN(layer.q, w->Matrix(p + "self_attn.q_proj.weight", q_dim, hidden));
    FR_ASSIGN_OR_RETURN(layer.k, w->Matrix(p + "self_attn.k_proj.weight", kv_dim, hidden));
    FR_ASSIGN_OR_RETURN(layer.v, w->Matrix(p + "self_attn.v_proj.weight", kv_dim, hidden));
    FR_ASSIGN_OR_RETURN(layer.o, w->Matrix(p + "self_attn.o_proj.weight", hidden, q_dim));
    if (o.qkv_bias) {
      FR_ASSIGN_OR_RETURN(layer.q_bias, w->Vector(p + "self_attn.q_proj.bias", q_dim));
      FR_ASSIGN_OR_RETURN(layer.k_bias, w->Vector(p + "self_attn.k_proj.bias", kv_dim));
      FR_ASSIGN_OR_RETURN(layer.v_bias, w->Vector(p + "self_attn.v_proj.bias", kv_dim));
    }
    if (o.qk_norm) {
      FR_ASSIGN_OR_RETURN(layer.q_norm, w->Vector(p + "self_attn.q_norm.weight", c.head_dim));
      FR_ASSIGN_OR_RETURN(layer.k_norm, w->Vector(p + "self_attn.k_norm.weight", c.head_dim));
    }
    const int64_t width = c.intermediate_size;
    FR_ASSIGN_OR_RETURN(layer.gate, w->Matrix(p + "mlp.gate_proj.weight", width, hidden));
    FR_ASSIGN_OR_RETURN(layer.up, w->Matrix(p + "mlp.up_proj.weight", width, hidden));
    FR_ASSIGN_OR_RETURN(layer.down, w->Matrix(p + "mlp.down_proj.weight", hidden, width));
  }
  return w;
}

}  // namespace flashroll::engine::cuda
