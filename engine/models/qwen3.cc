// Qwen3: no q/k/v bias, a per-head RMSNorm on q and k before RoPE, and an
// explicit head_dim that need not equal hidden_size / num_attention_heads.
#include "engine/models/architecture.h"

namespace flashroll::engine {
namespace {

Status ConfigureQwen3(const ModelConfig& config, DecoderOptions* options) {
  if (config.num_experts != 0) return Status::InvalidArgument("num_experts: qwen3 has no experts");
  options->qkv_bias = config.attention_bias.value_or(false);
  options->qk_norm = true;
  return Status::Ok();
}

}  // namespace

extern const Architecture kQwen3Architecture = {
    .model_type = "qwen3",
    .gguf_name = "qwen3",
    .gguf_permuted_qk = false,
    .gguf_norm_topk_prob = false,
    .configure = ConfigureQwen3,
};

}  // namespace flashroll::engine
