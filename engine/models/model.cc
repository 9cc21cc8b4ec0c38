#include "engine/models/model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/kernels/cpu_threads.h"
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
  return Status::Ok();
}

KvCache Model::NewCache() const {
  return KvCache(config().num_layers, config().num_kv_heads * config().head_dim);
}

int64_t Model::ParameterCount() const {
  int64_t total = 0;
  for (const auto& [name, t] : files_->tensors()) {
    if (name != "rope_freqs.weight") total += NumElements(t.shape);
  }
  return total;
}

int64_t Model::KvBytesPerToken() const {
  const ModelConfig& c = config();
  return 2 * c.num_layers * c.num_kv_heads * c.head_dim * static_cast<int64_t>(sizeof(float));
}

std::string Model::WeightDType() const {
  return layers_.empty() ? "f32" : kernels::DTypeName(layers_[0].q.dtype);
}

void Model::RunMlp(const Mlp& mlp, const float* h, int64_t n, float* out) const {
  const int64_t width = mlp.gate.rows;
  std::vector<float> gate(static_cast<size_t>(n * width)), up(static_cast<size_t>(n * width));
  kernels::MatMul(mlp.gate, h, n, gate.data());
  kernels::MatMul(mlp.up, h, n, up.data());
  kernels::SwiGlu(gate.data(), up.data(), n * width, gate.data());
  kernels::MatMul(mlp.down, gate.data(), n, out);
}

void Model::RunMoe(const Layer& layer, const float* h, int64_t n, float* out,
                   std::vector<std::vector<int32_t>>* routing) const {
  const ModelConfig& c = config();
  const int64_t hidden = c.hidden_size;
  const int64_t experts = c.num_experts;
  const int64_t k = c.num_experts_per_tok;
  std::vector<float> probs(static_cast<size_t>(n * experts));
  kernels::MatMul(layer.router, h, n, probs.data());
  std::vector<int32_t> chosen(static_cast<size_t>(n * k));
  std::vector<float> weights(static_cast<size_t>(n * k));
  std::vector<std::vector<int64_t>> tokens_of(static_cast<size_t>(experts));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(experts));
  for (int64_t t = 0; t < n; ++t) {
    float* p = &probs[t * experts];
    kernels::Softmax(p, experts);
    int32_t* ids = &chosen[t * k];
    TopK(p, experts, k, ids);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += p[ids[j]];
    for (int64_t j = 0; j < k; ++j) {
      const float w = c.norm_topk_prob ? p[ids[j]] / sum : p[ids[j]];
      tokens_of[ids[j]].push_back(t);
      weights_of[ids[j]].push_back(w);
    }
    if (routing) routing->emplace_back(ids, ids + k);
  }
  std::fill(out, out + n * hidden, 0.0f);
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<int64_t>& toks = tokens_of[e];
    if (toks.empty()) continue;
    const int64_t m = static_cast<int64_t>(toks.size());
    xs.resize(static_cast<size_t>(m * hidden));
    ys.resize(static_cast<size_t>(m * hidden));
    for (int64_t i = 0; i < m; ++i) std::copy_n(h + toks[i] * hidden, hidden, &xs[i * hidden]);
    RunMlp(layer.experts[e], xs.data(), m, ys.data());
    for (int64_t i = 0; i < m; ++i) kernels::Axpy(weights_of[e][i], &ys[i * hidden], hidden, out + toks[i] * hidden);
  }
  if (layer.shared) {
    std::vector<float> shared(static_cast<size_t>(n * hidden));
    RunMlp(layer.shared_mlp, h, n, shared.data());
    for (int64_t t = 0; t < n; ++t) {
      const float g = kernels::Dot(layer.shared_gate.data(), h + t * hidden, hidden);
      const float scale = 1.0f / (1.0f + std::exp(-g));
      kernels::Axpy(scale, &shared[t * hidden], hidden, out + t * hidden);
    }
  }
}

void Model::Attention(const Layer& layer, int64_t layer_index, const float* h, int64_t n, KvCache* cache,
                      float* out) const {
  const ModelConfig& c = config();
  const int64_t hd = c.head_dim;
  const int64_t heads = c.num_heads;
  const int64_t kv_heads = c.num_kv_heads;
  const int64_t q_dim = heads * hd;
  const int64_t kv_dim = kv_heads * hd;
  const int64_t start = cache->length();
  std::vector<float> q(static_cast<size_t>(n * q_dim)), k(static_cast<size_t>(n * kv_dim)),
      v(static_cast<size_t>(n * kv_dim));
  kernels::MatMul(layer.q, h, n, q.data());
  kernels::MatMul(layer.k, h, n, k.data());
  kernels::MatMul(layer.v, h, n, v.data());
  const int64_t half = hd / 2;
  std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
  for (int64_t t = 0; t < n; ++t) {
    float* qt = &q[t * q_dim];
    float* kt = &k[t * kv_dim];
    float* vt = &v[t * kv_dim];
    if (!layer.q_bias.empty()) {
      kernels::Add(qt, layer.q_bias.data(), q_dim, qt);
      kernels::Add(kt, layer.k_bias.data(), kv_dim, kt);
      kernels::Add(vt, layer.v_bias.data(), kv_dim, vt);
    }
    if (!layer.q_norm.empty()) {
      for (int64_t i = 0; i < heads; ++i) {
        kernels::RmsNorm(qt + i * hd, layer.q_norm.data(), hd, static_cast<float>(c.rms_norm_eps), qt + i * hd);
      }
      for (int64_t i = 0; i < kv_heads; ++i) {
        kernels::RmsNorm(kt + i * hd, layer.k_norm.data(), hd, static_cast<float>(c.rms_norm_eps), kt + i * hd);
      }
    }
    const float pos = static_cast<float>(start + t);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq_[i];
      cos[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    kernels::ApplyRopeNeox(qt, heads, hd, cos.data(), sin.data());
    kernels::ApplyRopeNeox(kt, kv_heads, hd, cos.data(), sin.data());
    std::copy_n(kt, kv_dim, cache->Key(layer_index, start + t));
    std::copy_n(vt, kv_dim, cache->Value(layer_index, start + t));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t group = heads / kv_heads;
  const KvCache& kv = *cache;
  // One task per (token, head): scores over the causal prefix, softmax, weighted sum of values.
  kernels::ParallelFor(n * heads, [&](int64_t task) {
    const int64_t t = task / heads;
    const int64_t head = task % heads;
    const int64_t kvh = head / group;
    const int64_t len = start + t + 1;
    const float* qv = &q[t * q_dim + head * hd];
    std::vector<float> scores(static_cast<size_t>(len));
    for (int64_t j = 0; j < len; ++j) scores[j] = kernels::Dot(qv, kv.Key(layer_index, j) + kvh * hd, hd) * scale;
    kernels::Softmax(scores.data(), len);
    float* o = out + t * q_dim + head * hd;
    std::fill(o, o + hd, 0.0f);
    for (int64_t j = 0; j < len; ++j) kernels::Axpy(scores[j], kv.Value(layer_index, j) + kvh * hd, hd, o);
  });
}

Status Model::Forward(const std::vector<int32_t>& tokens, KvCache* cache, bool all_logits,
                      std::vector<float>* logits, Routing* routing) const {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return Status::InvalidArgument("no tokens to run");
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) {
      return Status::InvalidArgument("token " + std::to_string(tokens[t]) + " at position " +
                                     std::to_string(t) + " is outside the vocabulary of " +
                                     std::to_string(c.vocab_size));
    }
  }
  const int64_t hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  FR_ASSIGN_OR_RETURN(int64_t row_bytes, kernels::RowBytes(embed_->dtype, hidden));
  std::vector<float> x(static_cast<size_t>(n * hidden));
  for (int64_t t = 0; t < n; ++t) {
    FR_RETURN_IF_ERROR(kernels::DequantizeRow(embed_->dtype, embed_->data + tokens[t] * row_bytes, hidden,
                                              &x[t * hidden]));
  }
  cache->Reserve(n);
  if (routing) routing->assign(layers_.size(), {});
  std::vector<float> h(x.size()), attn(static_cast<size_t>(n * c.num_heads * c.head_dim)), y(x.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    for (int64_t t = 0; t < n; ++t) kernels::RmsNorm(&x[t * hidden], layer.attn_norm.data(), hidden, eps, &h[t * hidden]);
    Attention(layer, static_cast<int64_t>(l), h.data(), n, cache, attn.data());
    kernels::MatMul(layer.o, attn.data(), n, y.data());
    kernels::Add(x.data(), y.data(), n * hidden, x.data());
    for (int64_t t = 0; t < n; ++t) kernels::RmsNorm(&x[t * hidden], layer.ffn_norm.data(), hidden, eps, &h[t * hidden]);
    if (layer.moe) {
      RunMoe(layer, h.data(), n, y.data(), routing ? &(*routing)[l] : nullptr);
    } else {
      RunMlp(layer.mlp, h.data(), n, y.data());
    }
    kernels::Add(x.data(), y.data(), n * hidden, x.data());
  }
  cache->Advance(n);
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  for (int64_t t = first; t < n; ++t) {
    kernels::RmsNorm(&x[t * hidden], final_norm_.data(), hidden, eps, &h[(t - first) * hidden]);
  }
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  kernels::MatMul(lm_head_, h.data(), rows, logits->data());
  return Status::Ok();
}

}  // namespace flashroll::engine
