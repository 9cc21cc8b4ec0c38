// Qwen3-MoE: qwen3 attention (q/k norm) with a routed mixture of experts:
// softmax over router logits, top-k, optionally renormalised
// (norm_topk_prob); layers in mlp_only_layers keep a dense FFN.
#include "engine/models/architecture.h"

namespace flashroll::engine {
namespace {

Status ConfigureQwen3Moe(const ModelConfig& config, DecoderOptions* options) {
  if (config.num_experts <= 0) {
    return Status::InvalidArgument("num_experts: qwen3_moe needs a positive expert count");
  }
  options->qkv_bias = config.attention_bias.value_or(false);
  options->qk_norm = true;
  options->moe = true;
  return Status::Ok();
}

}  // namespace

extern const Architecture kQwen3MoeArchitecture = {
    .model_type = "qwen3_moe",
    .gguf_name = "qwen3moe",
    .gguf_permuted_qk = false,
    .gguf_norm_topk_prob = true,
    .configure = ConfigureQwen3Moe,
};

}  // namespace flashroll::engine
