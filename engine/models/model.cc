#include "engine/models/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/kernels/cpu_threads.h"
#include "engine/kernels/dtype.h"
#include "engine/kernels/quantize.h"
#include "engine/kernels/vector_ops.h"

namespace flashroll::engine {

struct Model::Mlp {
  kernels::WeightView gate, up, down;
};

struct Model::Layer {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;
  kernels::WeightView q, k, v, o;
  std::vector<float> q_bias, k_bias, v_bias;
  bool moe = false;
  Mlp mlp;                     // dense layers
  kernels::WeightView router;  // MoE layers: [experts][hidden]
  std::vector<Mlp> experts;
  bool shared = false;
  Mlp shared_mlp;
  std::vector<float> shared_gate;  // [hidden]
};

namespace {

// Hugging Face's inverse frequencies, including rope scaling (computed in
// float like transformers, so angles agree to the last bit or two).
std::vector<float> InverseFrequencies(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = static_cast<float>(1.0 / std::pow(c.rope.theta, static_cast<double>(exponent)));
  }
  const RopeConfig& r = c.rope;
  if (r.scaling == RopeScalingType::kLinear) {
    for (float& f : inv) f = static_cast<float>(f / r.factor);
  } else if (r.scaling == RopeScalingType::kLlama3) {
    const double old_len = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old_len / r.low_freq_factor;
    const double high_wavelen = old_len / r.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen < high_wavelen) continue;  // high frequency: unchanged
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / r.factor);
        continue;
      }
      const double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = static_cast<float>((1 - smooth) * f / r.factor + smooth * f);
    }
  }
  return inv;
}

// Top-k ids of probs in descending order, ties to the lower id.
void TopK(const float* probs, int64_t n, int64_t k, int32_t* ids) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  });
  std::copy(order.begin(), order.begin() + k, ids);
}

}  // namespace

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> files, ModelFiles::Load(path));
  return Build(std::move(files));
}

Result<std::unique_ptr<Model>> Model::Build(std::unique_ptr<ModelFiles> files) {
  std::unique_ptr<Model> model(new Model());
  model->files_ = std::move(files);
  FR_RETURN_IF_ERROR(model->Init());
  return model;
}

Result<kernels::WeightView> Model::Linear(const std::string& name, int64_t rows, int64_t cols) {
  FR_ASSIGN_OR_RETURN(const WeightTensor* t, files_->Get(name, {rows, cols}));
  kernels::WeightView w{t->dtype, t->data, rows, cols};
  Status st = kernels::CheckWeightView(w);
  if (!st.ok()) return st.Wrap(t->file + ": tensor '" + name + "'");
  return w;
}

Result<std::vector<float>> Model::Vector(const std::string& name, int64_t n) {
  FR_ASSIGN_OR_RETURN(const WeightTensor* t, files_->Get(name, {n}));
  std::vector<float> out(static_cast<size_t>(n));
  Status st = kernels::DequantizeRow(t->dtype, t->data, n, out.data());
  if (!st.ok()) return st.Wrap(t->file + ": tensor '" + name + "'");
  return out;
}

Status Model::InitMlp(const std::string& prefix, int64_t width, Mlp* mlp) {
  const int64_t hidden = config().hidden_size;
  FR_ASSIGN_OR_RETURN(mlp->gate, Linear(prefix + "gate_proj.weight", width, hidden));
  FR_ASSIGN_OR_RETURN(mlp->up, Linear(prefix + "up_proj.weight", width, hidden));
  FR_ASSIGN_OR_RETURN(mlp->down, Linear(prefix + "down_proj.weight", hidden, width));
  return Status::Ok();
}

Status Model::InitLayer(int64_t index, Layer* layer) {
  const ModelConfig& c = config();
  const std::string p = "model.layers." + std::to_string(index) + ".";
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  FR_ASSIGN_OR_RETURN(layer->attn_norm, Vector(p + "input_layernorm.weight", hidden));
  FR_ASSIGN_OR_RETURN(layer->ffn_norm, Vector(p + "post_attention_layernorm.weight", hidden));
  FR_ASSIGN_OR_RETURN(layer->q, Linear(p + "self_attn.q_proj.weight", q_dim, hidden));
  FR_ASSIGN_OR_RETURN(layer->k, Linear(p + "self_attn.k_proj.weight", kv_dim, hidden));
  FR_ASSIGN_OR_RETURN(layer->v, Linear(p + "self_attn.v_proj.weight", kv_dim, hidden));
  FR_ASSIGN_OR_RETURN(layer->o, Linear(p + "self_attn.o_proj.weight", hidden, q_dim));
  if (options_.qkv_bias) {
    FR_ASSIGN_OR_RETURN(layer->q_bias, Vector(p + "self_attn.q_proj.bias", q_dim));
    FR_ASSIGN_OR_RETURN(layer->k_bias, Vector(p + "self_attn.k_proj.bias", kv_dim));
    FR_ASSIGN_OR_RETURN(layer->v_bias, Vector(p + "self_attn.v_proj.bias", kv_dim));
  }
  if (options_.qk_norm) {
    FR_ASSIGN_OR_RETURN(layer->q_norm, Vector(p + "self_attn.q_norm.weight", c.head_dim));
    FR_ASSIGN_OR_RETURN(layer->k_norm, Vector(p + "self_attn.k_norm.weight", c.head_dim));
  }
  layer->moe = options_.moe && c.IsMoeLayer(index);
  if (!layer->moe) return InitMlp(p + "mlp.", c.intermediate_size, &layer->mlp);

  FR_ASSIGN_OR_RETURN(layer->router, Linear(p + "mlp.gate.weight", c.num_experts, hidden));
  layer->experts.resize(static_cast<size_t>(c.num_experts));
  for (int64_t e = 0; e < c.num_experts; ++e) {
    FR_RETURN_IF_ERROR(InitMlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size,
                               &layer->experts[e]));
  }
  if (options_.shared_expert) {
    layer->shared = true;
    FR_RETURN_IF_ERROR(InitMlp(p + "mlp.shared_expert.", c.shared_expert_intermediate_size, &layer->shared_mlp));
    FR_ASSIGN_OR_RETURN(layer->shared_gate, Vector(p + "mlp.shared_expert_gate.weight", hidden));
  }
  return Status::Ok();
}

Status Model::Init() {
  const ModelConfig& c = config();
  arch_ = FindArchitecture(c.architecture);
  if (arch_ == nullptr) {
    return Status::InvalidArgument(files_->config_file() + ": model_type: unknown architecture '" +
                                   c.architecture + "' (supported: " + ArchitectureNames() + ")");
  }
  Status st = arch_->configure(c, &options_);
  if (!st.ok()) return st.Wrap(files_->config_file());

  FR_ASSIGN_OR_RETURN(embed_, files_->Get("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}));
  FR_ASSIGN_OR_RETURN(final_norm_, Vector("model.norm.weight", c.hidden_size));
  if (c.tie_word_embeddings) {
    lm_head_ = {embed_->dtype, embed_->data, c.vocab_size, c.hidden_size};
    FR_RETURN_IF_ERROR(kernels::CheckWeightView(lm_head_).Wrap(embed_->file + ": tensor 'model.embed_tokens.weight'"));
  } else {
    FR_ASSIGN_OR_RETURN(lm_head_, Linear("lm_head.weight", c.vocab_size, c.hidden_size));
  }
  inv_freq_ = InverseFrequencies(c);
  if (files_->Find("rope_freqs.weight") != nullptr) {
    // GGUF's precomputed frequency divisors (llama3-style scaling).
    FR_ASSIGN_OR_RETURN(std::vector<float> factors, Vector("rope_freqs.weight", c.head_dim / 2));
    for (size_t i = 0; i < factors.size(); ++i) inv_freq_[i] /= factors[i];
  }
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) FR_RETURN_IF_ERROR(InitLayer(l, &layers_[l]));
  for (const Layer& layer : layers_) routing_shape_.moe_layers += layer.moe ? 1 : 0;
  if (routing_shape_.moe_layers > 0) {
    routing_shape_.k = c.num_experts_per_tok;
    routing_shape_.num_experts = c.num_experts;
  }
  return Status::Ok();
}

KvLayout Model::KvLayoutFor(int64_t block_size, KvDType dtype) const {
  const ModelConfig& c = config();
  return KvLayout{c.num_layers, c.num_kv_heads, c.head_dim, block_size, dtype};
}

KvCache Model::NewCache() const { return KvCache(KvLayoutFor(16, KvDType::kF32)); }

int64_t Model::ParameterCount() const {
  int64_t total = 0;
  for (const auto& [name, t] : files_->tensors()) {
    if (name != "rope_freqs.weight") total += NumElements(t.shape);
  }
  return total;
}

int64_t Model::WeightBytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : files_->tensors()) {
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    Result<int64_t> row = kernels::RowBytes(t.dtype, cols);
    if (row.ok() && cols > 0) total += *row * (NumElements(t.shape) / cols);
  }
  return total;
}

int64_t Model::KvBytesPerToken() const {
  const ModelConfig& c = config();
  return 2 * c.num_layers * c.num_kv_heads * c.head_dim * static_cast<int64_t>(sizeof(float));
}

int64_t Model::MaxPositions() const { return config().max_position_embeddings; }

std::string Model::WeightDType() const {
  return layers_.empty() ? "f32" : kernels::DTypeName(layers_[0].q.dtype);
}

namespace {

float* Grow(std::vector<float>* v, int64_t n) {
  if (static_cast<int64_t>(v->size()) < n) v->resize(static_cast<size_t>(n));
  return v->data();
}

// Why a batch's replayed routing cannot run, or Ok.
Status CheckReplay(const engine::ForwardBatch& batch, const RoutingShape& shape) {
  if (batch.replay_offsets.empty()) return Status::Ok();
  const int64_t rows = static_cast<int64_t>(batch.tokens.size());
  if (static_cast<int64_t>(batch.replay_offsets.size()) != rows) {
    return Status::InvalidArgument("routing replay: " + std::to_string(batch.replay_offsets.size()) +
                                   " row offsets for " + std::to_string(rows) + " rows");
  }
  const int64_t per_row = shape.TokenIds();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = batch.replay_offsets[r];
    if (at < 0) continue;
    if (shape.empty()) return Status::InvalidArgument("routing replay: the model has no MoE layers");
    if (at + per_row > static_cast<int64_t>(batch.replay_ids.size())) {
      return Status::InvalidArgument("routing replay: row " + std::to_string(r) + "'s ids run past the " +
                                     std::to_string(batch.replay_ids.size()) + " given");
    }
    for (int64_t l = 0; l < shape.moe_layers; ++l) {
      const int32_t* ids = &batch.replay_ids[at + l * shape.k];
      for (int64_t j = 0; j < shape.k; ++j) {
        const bool outside = ids[j] < 0 || ids[j] >= shape.num_experts;
        if (!outside && std::find(ids, ids + j, ids[j]) == ids + j) continue;
        const std::string where = "row " + std::to_string(r) + ": moe layer " + std::to_string(l) + ": expert " +
                                  std::to_string(ids[j]);
        if (outside) {
          return Status::InvalidArgument(where + " out of range [0, " + std::to_string(shape.num_experts) + ")");
        }
        return Status::InvalidArgument(where + " repeated");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

void Model::RunMlp(const Mlp& mlp, const float* h, int64_t n, float* out, ForwardScratch* s) const {
  const int64_t width = mlp.gate.rows;
  float* gate = Grow(&s->gate, n * width);
  float* up = Grow(&s->up, n * width);
  kernels::MatMul(mlp.gate, h, n, gate);
  kernels::MatMul(mlp.up, h, n, up);
  kernels::SwiGlu(gate, up, n * width, gate);
  kernels::MatMul(mlp.down, gate, n, out);
}

void Model::RunMoe(const Layer& layer, int64_t moe_index, const engine::ForwardBatch& batch, const float* h,
                   int64_t n, float* out, ForwardScratch* s, int32_t* routed) const {
  const ModelConfig& c = config();
  const int64_t hidden = c.hidden_size;
  const int64_t experts = c.num_experts;
  const int64_t k = c.num_experts_per_tok;
  const int64_t stride = routing_shape_.TokenIds();
  float* probs = Grow(&s->moe_probs, n * experts);
  kernels::MatMul(layer.router, h, n, probs);
  s->moe_chosen.resize(static_cast<size_t>(n * k));
  s->moe_tokens.resize(static_cast<size_t>(experts));
  s->moe_weights.resize(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    s->moe_tokens[e].clear();
    s->moe_weights[e].clear();
  }
  for (int64_t t = 0; t < n; ++t) {
    float* p = &probs[t * experts];
    kernels::Softmax(p, experts);
    int32_t* ids = &s->moe_chosen[t * k];
    const int64_t replay = batch.replay_offsets.empty() ? -1 : batch.replay_offsets[t];
    if (replay >= 0) {
      std::copy_n(&batch.replay_ids[replay + moe_index * k], k, ids);
    } else {
      TopK(p, experts, k, ids);
    }
    // The same weights whether the ids were chosen or replayed.
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += p[ids[j]];
    for (int64_t j = 0; j < k; ++j) {
      const float w = c.norm_topk_prob ? p[ids[j]] / sum : p[ids[j]];
      s->moe_tokens[ids[j]].push_back(t);
      s->moe_weights[ids[j]].push_back(w);
    }
    if (routed) std::copy_n(ids, k, routed + t * stride + moe_index * k);
  }
  std::fill(out, out + n * hidden, 0.0f);
  // Each token's expert outputs are added in ascending expert id, whatever
  // else is in the batch.
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<int64_t>& toks = s->moe_tokens[e];
    if (toks.empty()) continue;
    const int64_t m = static_cast<int64_t>(toks.size());
    float* xs = Grow(&s->moe_xs, m * hidden);
    float* ys = Grow(&s->moe_ys, m * hidden);
    for (int64_t i = 0; i < m; ++i) std::copy_n(h + toks[i] * hidden, hidden, &xs[i * hidden]);
    RunMlp(layer.experts[e], xs, m, ys, s);
    for (int64_t i = 0; i < m; ++i) kernels::Axpy(s->moe_weights[e][i], &ys[i * hidden], hidden, out + toks[i] * hidden);
  }
  if (layer.shared) {
    float* shared = Grow(&s->shared, n * hidden);
    RunMlp(layer.shared_mlp, h, n, shared, s);
    for (int64_t t = 0; t < n; ++t) {
      const float g = kernels::Dot(layer.shared_gate.data(), h + t * hidden, hidden);
      const float scale = 1.0f / (1.0f + std::exp(-g));
      kernels::Axpy(scale, &shared[t * hidden], hidden, out + t * hidden);
    }
  }
}

void Model::Attention(const Layer& layer, int64_t layer_index, int64_t n, PagedKvStorage* kv,
                      ForwardScratch* s) const {
  const ModelConfig& c = config();
  const KvLayout& lay = kv->layout();
  const int64_t hd = c.head_dim;
  const int64_t heads = c.num_heads;
  const int64_t kv_heads = c.num_kv_heads;
  const int64_t q_dim = heads * hd;
  const int64_t kv_dim = kv_heads * hd;
  const int64_t half = hd / 2;
  float* q = Grow(&s->q, n * q_dim);
  float* k = Grow(&s->k, n * kv_dim);
  float* v = Grow(&s->v, n * kv_dim);
  kernels::MatMul(layer.q, s->h.data(), n, q);
  kernels::MatMul(layer.k, s->h.data(), n, k);
  kernels::MatMul(layer.v, s->h.data(), n, v);
  const int64_t bs = lay.block_size;
  const int64_t half_block = lay.HalfBlockBytes();
  uint8_t* kbase = kv->KeyBase(layer_index);
  uint8_t* vbase = kv->ValueBase(layer_index);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t t = 0; t < n; ++t) {
    float* qt = q + t * q_dim;
    float* kt = k + t * kv_dim;
    float* vt = v + t * kv_dim;
    if (!layer.q_bias.empty()) {
      kernels::Add(qt, layer.q_bias.data(), q_dim, qt);
      kernels::Add(kt, layer.k_bias.data(), kv_dim, kt);
      kernels::Add(vt, layer.v_bias.data(), kv_dim, vt);
    }
    if (!layer.q_norm.empty()) {
      for (int64_t i = 0; i < heads; ++i) kernels::RmsNorm(qt + i * hd, layer.q_norm.data(), hd, eps, qt + i * hd);
      for (int64_t i = 0; i < kv_heads; ++i) kernels::RmsNorm(kt + i * hd, layer.k_norm.data(), hd, eps, kt + i * hd);
    }
    const float* cos = &s->rope[t * 2 * half];
    kernels::ApplyRopeNeox(qt, heads, hd, cos, cos + half);
    kernels::ApplyRopeNeox(kt, kv_heads, hd, cos, cos + half);
    // Scatter into the paged layout: [block][kv_head][slot][head_dim].
    const int64_t pos = s->positions[t];
    const int64_t block = s->tables[t][pos / bs];
    const int64_t slot = pos % bs;
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t offset = block * half_block + (h * bs + slot) * hd * lay.ElementBytes();
      if (lay.dtype == KvDType::kF32) {
        std::memcpy(kbase + offset, kt + h * hd, static_cast<size_t>(hd * 4));
        std::memcpy(vbase + offset, vt + h * hd, static_cast<size_t>(hd * 4));
      } else {
        uint16_t* kd = reinterpret_cast<uint16_t*>(kbase + offset);
        uint16_t* vd = reinterpret_cast<uint16_t*>(vbase + offset);
        for (int64_t d = 0; d < hd; ++d) {
          kd[d] = kernels::F32ToBf16(kt[h * hd + d]);
          vd[d] = kernels::F32ToBf16(vt[h * hd + d]);
        }
      }
    }
  }
  kernels::PagedAttentionArgs a;
  a.q = q;
  a.out = s->attn.data();
  a.rows = n;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.k_base = kbase;
  a.v_base = vbase;
  a.half_block_bytes = half_block;
  a.block_size = bs;
  a.bf16 = lay.dtype == KvDType::kBF16;
  a.positions = s->positions.data();
  a.block_tables = s->tables.data();
  kernels::PagedAttention(a, &s->attention);
}

Status Model::PlanRows(const engine::ForwardBatch& batch, std::vector<int64_t>* positions,
                       std::vector<const int32_t*>* tables) const {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  if (n == 0) return Status::InvalidArgument("no tokens to run");
  positions->resize(static_cast<size_t>(n));
  tables->resize(static_cast<size_t>(n));
  int64_t row = 0;
  for (const BatchSequence& seq : batch.seqs) {
    for (int64_t i = 0; i < seq.num_tokens; ++i, ++row) {
      if (row >= n) return Status::InvalidArgument("batch sequences cover more rows than it has tokens");
      (*positions)[row] = seq.start + i;
      (*tables)[row] = seq.block_table;
    }
  }
  if (row != n) return Status::InvalidArgument("batch sequences cover fewer rows than it has tokens");
  const int64_t max_pos = MaxPositions();
  for (int64_t t = 0; t < n; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= c.vocab_size) {
      return Status::InvalidArgument("token " + std::to_string(batch.tokens[t]) + " at position " +
                                     std::to_string((*positions)[t]) + " is outside the vocabulary of " +
                                     std::to_string(c.vocab_size));
    }
    if (max_pos > 0 && (*positions)[t] >= max_pos) {
      return Status::InvalidArgument("position " + std::to_string((*positions)[t]) +
                                     " is beyond the model's context of " + std::to_string(max_pos) +
                                     " tokens (max_position_embeddings)");
    }
  }
  return CheckReplay(batch, routing_shape_);
}

void Model::RopeTable(const int64_t* positions, int64_t n, float* out) const {
  const int64_t half = config().head_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq_[i];
      out[t * 2 * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      out[t * 2 * half + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

Status Model::ForwardBatch(const engine::ForwardBatch& batch, PagedKvStorage* kv, ForwardScratch* s,
                           float* logits, std::vector<int32_t>* routed) const {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  if (n == 0) return Status::InvalidArgument("no tokens to run");
  const KvLayout& lay = kv->layout();
  if (lay.num_layers != c.num_layers || lay.num_kv_heads != c.num_kv_heads || lay.head_dim != c.head_dim) {
    return Status::InvalidArgument("KV storage layout does not match the model");
  }
  FR_RETURN_IF_ERROR(PlanRows(batch, &s->positions, &s->tables));
  const int64_t hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  FR_ASSIGN_OR_RETURN(int64_t row_bytes, kernels::RowBytes(embed_->dtype, hidden));
  float* x = Grow(&s->x, n * hidden);
  for (int64_t t = 0; t < n; ++t) {
    FR_RETURN_IF_ERROR(kernels::DequantizeRow(embed_->dtype, embed_->data + batch.tokens[t] * row_bytes, hidden,
                                              x + t * hidden));
  }
  // RoPE angles once per row for all layers.
  RopeTable(s->positions.data(), n, Grow(&s->rope, n * c.head_dim));
  int32_t* routed_rows = nullptr;
  if (routed && !routing_shape_.empty()) {
    routed->resize(static_cast<size_t>(n * routing_shape_.TokenIds()));
    routed_rows = routed->data();
  } else if (routed) {
    routed->clear();
  }
  int64_t moe_index = 0;
  float* h = Grow(&s->h, n * hidden);
  Grow(&s->attn, n * c.num_heads * c.head_dim);
  float* y = Grow(&s->y, n * hidden);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    for (int64_t t = 0; t < n; ++t) kernels::RmsNorm(x + t * hidden, layer.attn_norm.data(), hidden, eps, h + t * hidden);
    Attention(layer, static_cast<int64_t>(l), n, kv, s);
    kernels::MatMul(layer.o, s->attn.data(), n, y);
    kernels::Add(x, y, n * hidden, x);
    for (int64_t t = 0; t < n; ++t) kernels::RmsNorm(x + t * hidden, layer.ffn_norm.data(), hidden, eps, h + t * hidden);
    if (layer.moe) {
      RunMoe(layer, moe_index++, batch, h, n, y, s, routed_rows);
    } else {
      RunMlp(layer.mlp, h, n, y, s);
    }
    kernels::Add(x, y, n * hidden, x);
  }
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  if (rows == 0) return Status::Ok();
  for (int64_t i = 0; i < rows; ++i) {
    kernels::RmsNorm(x + batch.logit_rows[i] * hidden, final_norm_.data(), hidden, eps, h + i * hidden);
  }
  kernels::MatMul(lm_head_, h, rows, logits);
  return Status::Ok();
}

Status Model::Forward(const std::vector<int32_t>& tokens, KvCache* cache, bool all_logits,
                      std::vector<float>* logits, Routing* routing) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return Status::InvalidArgument("no tokens to run");
  cache->Reserve(n);
  engine::ForwardBatch batch;
  batch.tokens = tokens;
  batch.seqs.push_back({cache->length(), n, cache->block_table().data()});
  for (int64_t t = all_logits ? 0 : n - 1; t < n; ++t) batch.logit_rows.push_back(t);
  logits->resize(batch.logit_rows.size() * static_cast<size_t>(config().vocab_size));
  ForwardScratch scratch;
  std::vector<int32_t> routed;
  FR_RETURN_IF_ERROR(ForwardBatch(batch, cache->storage(), &scratch, logits->data(), routing ? &routed : nullptr));
  cache->Advance(n);
  if (routing) {
    // [row][moe_layer][k] to [layer][token][k], dense layers empty.
    routing->assign(layers_.size(), {});
    const int64_t k = routing_shape_.k;
    int64_t moe_index = 0;
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (!layers_[l].moe) continue;
      for (int64_t t = 0; t < n; ++t) {
        const int32_t* ids = &routed[t * routing_shape_.TokenIds() + moe_index * k];
        (*routing)[l].emplace_back(ids, ids + k);
      }
      ++moe_index;
    }
  }
  return Status::Ok();
}

}  // namespace flashroll::engine
