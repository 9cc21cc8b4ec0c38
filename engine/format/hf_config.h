// ModelConfig: the hyperparameters of a decoder-only transformer, and the
// reader that fills it from a Hugging Face `config.json` (plus the optional
// `generation_config.json`). The GGUF loader fills the same struct from GGUF
// metadata, so the model code never sees which format a model came from.
//
// Both transformers 4.x and 5.x spellings are accepted:
//   rope_theta + rope_scaling{type|rope_type, ...}  vs  rope_parameters{rope_theta, rope_type, ...}
//   num_experts  vs  num_local_experts
//   attention_bias  vs  qkv_bias
//   torch_dtype  vs  dtype
// Family-specific defaults (e.g. qwen2's always-on QKV bias) are applied by
// the model family, not here.
//
// Thread safety: ModelConfig is a plain value; the functions are reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "engine/format/mapped_file.h"

namespace flashroll::engine {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeScalingType scaling = RopeScalingType::kNone;
  double factor = 1.0;                        // linear and llama3
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // HF model_type: "llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense FFN width
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  std::optional<bool> attention_bias;  // unset: the family decides

  // Mixture of experts; num_experts == 0 means dense.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool norm_topk_prob = false;

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // generation stops at any of these; empty: never
  std::string dtype;                   // as recorded by the writer ("float32", "bfloat16"), may be empty

  // True when layer `layer` uses the mixture-of-experts FFN (HF's rule:
  // not in mlp_only_layers, and (layer + 1) % decoder_sparse_step == 0).
  bool IsMoeLayer(int64_t layer) const;
};

// Fills a ModelConfig from parsed config.json content. `what` names the
// source in errors ("models/x/config.json"). Returns InvalidArgument naming
// the key for a missing or malformed value, and Unimplemented for settings
// the engine does not support (another rope type, an activation other than
// silu, FFN biases, sliding-window attention).
Result<ModelConfig> ParseHfConfig(const Json& config, const std::string& what);

// Applies generation_config.json content: its eos_token_id (int or list)
// and bos_token_id replace the ones from config.json when present.
Status ApplyGenerationConfig(const Json& generation, const std::string& what, ModelConfig* config);

// Reads `dir`/config.json and, when it exists, `dir`/generation_config.json.
// Errors name the file and the key.
Result<ModelConfig> ReadHfConfig(const std::string& dir);
// The same, with the files mapped by `map` (`dir` names them in errors).
Result<ModelConfig> ReadHfConfig(const std::string& dir, const DirectoryFileMapper& map);

// Checks the invariants every family relies on (positive sizes, heads
// divisible by kv heads, experts-per-token within experts, ...). Returns
// InvalidArgument naming the offending field, prefixed by `what`.
Status ValidateModelConfig(const ModelConfig& config, const std::string& what);

}  // namespace flashroll::engine
