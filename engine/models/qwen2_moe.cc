// Qwen2-MoE (Qwen1.5-MoE): qwen2 attention (q/k/v bias) with routed experts
// plus a shared expert whose output is scaled by sigmoid(shared_expert_gate . x).
#include "engine/models/architecture.h"

namespace flashroll::engine {
namespace {

Status ConfigureQwen2Moe(const ModelConfig& config, DecoderOptions* options) {
  if (config.num_experts <= 0) {
    return Status::InvalidArgument("num_experts: qwen2_moe needs a positive expert count");
  }
  options->qkv_bias = config.attention_bias.value_or(true);
  options->moe = true;
  options->shared_expert = config.shared_expert_intermediate_size > 0;
  return Status::Ok();
}

}  // namespace

extern const Architecture kQwen2MoeArchitecture = {
    .model_type = "qwen2_moe",
    .gguf_name = "qwen2moe",
    .gguf_permuted_qk = false,
    .gguf_norm_topk_prob = false,
    .configure = ConfigureQwen2Moe,
};

}  // namespace flashroll::engine
