// Model: a decoder-only transformer of one of the registered families
// (architecture.h), built over the weights of a ModelFiles and run on the
// CPU in float32 activations.
//
// Every family is the same pre-norm decoder: embedding; per layer RMSNorm,
// grouped-query attention with RoPE (rotate-half), residual, RMSNorm, a
// SwiGLU FFN or a routed mixture of experts, residual; final RMSNorm and the
// LM head (or the tied embedding). Families differ only by the
// DecoderOptions their Architecture entry picks.
//
// Mixture of experts: router probabilities are softmax(router logits); the
// top-k experts are those with the highest probability, ties broken by the
// lower expert id; their weights are the probabilities, divided by their sum
// when norm_topk_prob. Forward() can record the chosen expert ids per layer
// and token in that (descending) order. A ForwardBatch may replay recorded
// ids for some rows instead (routing replay, R3, as Megatron's and slime's):
// those experts are used, weighted by their router probabilities under the
// same norm_topk_prob rule (softmax over all experts, then divided by the
// replayed experts' sum when norm_topk_prob): the recorded choice, weighted
// by the current router.
//
// Every forward pass is a ForwardBatch (forward_batch.h): many sequences'
// tokens flattened into rows over a paged KV storage. Row results are
// batch-invariant: a row's logits depend only on its sequence and the
// weights, never on the other rows, the thread count, or whether the row was
// part of a prefill chunk or a decode step (the matmul reduces each output in
// one fixed order; attention.h; norms and routing are per row).
//
// Thread safety: a Model is immutable after Load(); Forward() and
// ForwardBatch() may be called from several threads at once on distinct
// caches and scratch (the kernels' worker pool serialises their kernels).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/format/model_loader.h"
#include "engine/kernels/matmul.h"
#include "engine/models/architecture.h"
#include "engine/models/forward_batch.h"
#include "engine/models/kv_cache.h"
#include "engine/models/paged_kv_storage.h"
#include "engine/models/routing.h"

namespace flashroll::engine {

// Expert ids chosen for each token: [layer][token][k]. Dense layers of a
// MoE model (and every layer of a dense model) have no tokens.
using Routing = std::vector<std::vector<std::vector<int32_t>>>;

class Model {
 public:
  // Loads `path` (HF directory or GGUF file) and builds the model. Errors
  // name the file and the key or tensor: everything ModelFiles::Load
  // reports, an unknown architecture ("<config file>: model_type: unknown
  // architecture 'x' (supported: ...)"), a missing tensor, or a tensor whose
  // shape disagrees with the config.
  static Result<std::unique_ptr<Model>> Load(const std::string& path);
  // Builds the model over already loaded files (which it keeps).
  static Result<std::unique_ptr<Model>> Build(std::unique_ptr<ModelFiles> files);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return files_->config(); }
  const ModelFiles& files() const { return *files_; }
  const Architecture& architecture() const { return *arch_; }

  // An empty single-sequence cache (f32) for Forward().
  KvCache NewCache() const;
  // The KV layout of this model with the given block size and dtype.
  KvLayout KvLayoutFor(int64_t block_size, KvDType dtype) const;

  // Runs `tokens` at positions cache->length() .. + tokens.size() - 1,
  // appending their keys and values to the cache. Writes the logits of every
  // token ([tokens.size()][vocab]) when all_logits, else of the last token
  // only ([vocab]), to *logits. When routing is not null, it receives the
  // expert ids chosen for these tokens. Returns InvalidArgument for a token
  // id outside the vocabulary (naming its position), an empty token list, or
  // positions beyond max_position_embeddings (naming the limit).
  Status Forward(const std::vector<int32_t>& tokens, KvCache* cache, bool all_logits,
                 std::vector<float>* logits, Routing* routing = nullptr) const;

  // Runs one batch over `kv` (whose layout must be KvLayoutFor(...) of this
  // model), writing every row's keys and values into its sequence's blocks,
  // and the logits of batch.logit_rows to logits[i][vocab]. With routed (MoE
  // models), receives the experts every row used, [row][moe_layer][k]
  // (routing_shape()), replayed or chosen. Token ids and positions are
  // checked as in Forward (errors name the row); so are replayed ids:
  // InvalidArgument "row R: moe layer L: expert E out of range [0, N)" or
  // "... expert E repeated", and replay arrays that do not fit the batch.
  Status ForwardBatch(const engine::ForwardBatch& batch, PagedKvStorage* kv, ForwardScratch* scratch,
                      float* logits, std::vector<int32_t>* routed = nullptr) const;

  // The rows of `batch`, checked as ForwardBatch checks them (token ids,
  // positions, routing replay; errors name the row): each row's position
  // and block table. Other backends run the same checks through it.
  Status PlanRows(const engine::ForwardBatch& batch, std::vector<int64_t>* positions,
                  std::vector<const int32_t*>* tables) const;
  // RoPE angles of n rows: out[t] = cos[head_dim / 2], sin[head_dim / 2] at
  // positions[t] (float angle, cos and sin evaluated in double, as
  // transformers computes them).
  void RopeTable(const int64_t* positions, int64_t n, float* out) const;
  // The decoder variations of the model's family (architecture.h).
  const DecoderOptions& decoder_options() const { return options_; }

  // The shape of this model's per-token routing; empty for a dense model.
  RoutingShape routing_shape() const { return routing_shape_; }

  // Number of weight elements (the tied embedding counted once).
  int64_t ParameterCount() const;
  // Bytes its weight tensors take in their storage types.
  int64_t WeightBytes() const;
  // Bytes of KV cache one token takes (float32 keys and values, all layers).
  int64_t KvBytesPerToken() const;
  // The positions the model is configured for (max_position_embeddings; 0
  // when the config leaves it out).
  int64_t MaxPositions() const;
  // The storage type of the projection weights ("f32", "bf16", "q8_0", ...).
  std::string WeightDType() const;

 private:
  struct Layer;
  struct Mlp;

  Model() = default;
  Status Init();
  Status InitLayer(int64_t index, Layer* layer);
  Status InitMlp(const std::string& prefix, int64_t width, Mlp* mlp);
  Result<kernels::WeightView> Linear(const std::string& name, int64_t rows, int64_t cols);
  Result<std::vector<float>> Vector(const std::string& name, int64_t n);

  void Attention(const Layer& layer, int64_t layer_index, int64_t n, PagedKvStorage* kv,
                 ForwardScratch* s) const;
  void RunMlp(const Mlp& mlp, const float* h, int64_t n, float* out, ForwardScratch* s) const;
  // Routes rows afresh or as batch replays them (moe_index: the layer's
  // rank among MoE layers); writes each row's experts to
  // routed[row * TokenIds() + moe_index * k ...] when routed is not null.
  void RunMoe(const Layer& layer, int64_t moe_index, const engine::ForwardBatch& batch, const float* h, int64_t n,
              float* out, ForwardScratch* s, int32_t* routed) const;

  std::unique_ptr<ModelFiles> files_;
  const Architecture* arch_ = nullptr;
  DecoderOptions options_;
  const WeightTensor* embed_ = nullptr;
  kernels::WeightView lm_head_;
  std::vector<float> final_norm_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  std::vector<Layer> layers_;
  RoutingShape routing_shape_;
};

}  // namespace flashroll::engine
