// The model family registry: one Architecture entry per family, each defined
// in its own file (llama.cc, qwen2.cc, ...) and listed in one table
// (architecture.cc). Code that needs family-specific behaviour looks the
// entry up by name instead of switching on the family.
//
// Thread safety: the table is immutable.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/format/hf_config.h"

namespace flashroll::engine {

// The variations of the decoder that families pick from.
struct DecoderOptions {
  bool qkv_bias = false;       // q/k/v projections carry a bias (qwen2)
  bool qk_norm = false;        // per-head RMSNorm of q and k before RoPE (qwen3)
  bool moe = false;            // routed experts on the layers the config marks (qwen*_moe)
  bool shared_expert = false;  // plus a shared expert scaled by sigmoid(gate . x) (qwen2_moe)
};

struct Architecture {
  const char* model_type;  // Hugging Face config.json model_type
  const char* gguf_name;   // GGUF general.architecture
  // llama.cpp's converter stores this family's Q/K rows in interleaved RoPE
  // order; the loader undoes that to get Hugging Face's half-split order.
  bool gguf_permuted_qk;
  // Whether llama.cpp normalises the top-k expert weights for this family
  // when the GGUF file does not say (expert_weights_norm).
  bool gguf_norm_topk_prob;
  // Checks the config and picks the decoder options. Returns
  // InvalidArgument naming the key for a config the family cannot run.
  Status (*configure)(const ModelConfig& config, DecoderOptions* options);
};

// The entry for a Hugging Face model_type, or nullptr.
const Architecture* FindArchitecture(std::string_view model_type);
// The entry for a GGUF general.architecture, or nullptr.
const Architecture* FindGgufArchitecture(std::string_view gguf_name);
// "llama, qwen2, ..." for error messages.
std::string ArchitectureNames();

}  // namespace flashroll::engine
