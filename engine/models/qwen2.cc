// Qwen2 (and Qwen2.5): llama's layout plus a bias on the q, k and v
// projections, which Qwen2 configs do not spell out.
#include "engine/models/architecture.h"

namespace flashroll::engine {
namespace {

Status ConfigureQwen2(const ModelConfig& config, DecoderOptions* options) {
  if (config.num_experts != 0) return Status::InvalidArgument("num_experts: qwen2 has no experts");
  options->qkv_bias = config.attention_bias.value_or(true);
  return Status::Ok();
}

}  // namespace

extern const Architecture kQwen2Architecture = {
    .model_type = "qwen2",
    .gguf_name = "qwen2",
    .gguf_permuted_qk = false,
    .gguf_norm_topk_prob = false,
    .configure = ConfigureQwen2,
};

}  // namespace flashroll::engine
