// Llama 2 and 3: grouped-query attention, no biases, optional llama3 RoPE
// scaling (handled by the config), tied or untied embeddings.
#include "engine/models/architecture.h"

namespace flashroll::engine {
namespace {

Status ConfigureLlama(const ModelConfig& config, DecoderOptions* options) {
  if (config.num_experts != 0) return Status::InvalidArgument("num_experts: llama has no experts");
  options->qkv_bias = config.attention_bias.value_or(false);
  return Status::Ok();
}

}  // namespace

extern const Architecture kLlamaArchitecture = {
    .model_type = "llama",
    .gguf_name = "llama",
    .gguf_permuted_qk = true,
    .gguf_norm_topk_prob = false,
    .configure = ConfigureLlama,
};

}  // namespace flashroll::engine
