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

Result<DeviceMatrix> DeviceWeights::Stacked(const std::vector<Part>& parts, int64_t cols) {
  std::vector<const WeightTensor*> tensors;
  DeviceMatrix m;
  m.cols = cols;
  m.bf16 = true;
  for (const Part& part : parts) {
    FR_ASSIGN_OR_RETURN(const WeightTensor* t, model->files().Get(part.name, {part.rows, cols}));
    if (cols % 8 != 0) {
      return Status::InvalidArgument(t->file + ": tensor '" + part.name + "': the CUDA kernels need a width that is a "
                                     "multiple of 8, got " + std::to_string(cols));
    }
    tensors.push_back(t);
    m.rows += part.rows;
    m.bf16 = m.bf16 && t->dtype == kernels::DType::kBF16;
  }
  if (m.bf16) {
    std::vector<uint8_t> host(static_cast<size_t>(m.rows * cols) * 2);
    size_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t size = static_cast<size_t>(parts[i].rows * cols) * 2;
      std::memcpy(&host[at], tensors[i]->data, size);
      at += size;
    }
    FR_ASSIGN_OR_RETURN(m.data, Copy(host.data(), host.size()));
    return m;
  }
  std::vector<float> f32(static_cast<size_t>(m.rows * cols));
  float* out = f32.data();
  for (size_t i = 0; i < parts.size(); ++i) {
    const WeightTensor* t = tensors[i];
    FR_ASSIGN_OR_RETURN(const int64_t row_bytes, kernels::RowBytes(t->dtype, cols));
    for (int64_t r = 0; r < parts[i].rows; ++r, out += cols) {
      Status st = kernels::DequantizeRow(t->dtype, t->data + r * row_bytes, cols, out);
      if (!st.ok()) return st.Wrap(t->file + ": tensor '" + parts[i].name + "'");
    }
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

Status DeviceWeights::Mlp(const std::string& prefix, int64_t width, Layer* layer) {
  const int64_t hidden = model->config().hidden_size;
  FR_ASSIGN_OR_RETURN(layer->gate_up, Stacked({{prefix + "gate_proj.weight", width}, {prefix + "up_proj.weight", width}},
                                              hidden));
  FR_ASSIGN_OR_RETURN(layer->down, Matrix(prefix + "down_proj.weight", hidden, width));
  return Status::Ok();
}

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const Model& model) {
  const ModelConfig& c = model.config();
  if (!model.routing_shape().empty() && !RouteSupports(c.num_experts_per_tok)) {
    return Status::Unimplemented("the CUDA router takes at most 32 experts a token; the model's "
                                 "num_experts_per_tok is " + std::to_string(c.num_experts_per_tok));
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
    FR_ASSIGN_OR_RETURN(layer.qkv, w->Stacked({{p + "self_attn.q_proj.weight", q_dim},
                                               {p + "self_attn.k_proj.weight", kv_dim},
                                               {p + "self_attn.v_proj.weight", kv_dim}},
                                              hidden));
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
    layer.moe = o.moe && c.IsMoeLayer(l);
    if (!layer.moe) {
      FR_RETURN_IF_ERROR(w->Mlp(p + "mlp.", c.intermediate_size, &layer));
      continue;
    }
    FR_ASSIGN_OR_RETURN(layer.router, w->Matrix(p + "mlp.gate.weight", c.num_experts, hidden));
    const int64_t width = c.moe_intermediate_size;
    std::vector<Part> gate_up, down;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string expert = p + "mlp.experts." + std::to_string(e) + ".";
      gate_up.push_back({expert + "gate_proj.weight", width});
      gate_up.push_back({expert + "up_proj.weight", width});
      down.push_back({expert + "down_proj.weight", hidden});
    }
    FR_ASSIGN_OR_RETURN(layer.experts_gate_up, w->Stacked(gate_up, hidden));
    FR_ASSIGN_OR_RETURN(layer.experts_down, w->Stacked(down, width));
    if (o.shared_expert) {
      FR_RETURN_IF_ERROR(w->Mlp(p + "mlp.shared_expert.", c.shared_expert_intermediate_size, &layer));
      FR_ASSIGN_OR_RETURN(layer.shared_gate, w->Vector(p + "mlp.shared_expert_gate.weight", hidden));
    }
  }
  return w;
}

}  // namespace flashroll::engine::cuda
