#include "engine/format/hf_config.h"

#include <algorithm>

namespace flashroll::engine {
namespace {

// The first of `keys` present (and not null) in `view`, or nullptr.
const char* FirstKey(const JsonView& view, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (view.Has(key) && !view.value().at(key).is_null()) return key;
  }
  return nullptr;
}

Result<int64_t> PositiveInt(const JsonView& view, const char* key) {
  FR_ASSIGN_OR_RETURN(int64_t v, view.GetInt(key));
  if (v <= 0) {
    return Status::InvalidArgument(std::string(key) + ": expected a positive integer, got " +
                                   std::to_string(v));
  }
  return v;
}

// Token ids given as null, an integer or a list of integers.
Result<std::vector<int64_t>> TokenIds(const JsonView& view, const char* key) {
  std::vector<int64_t> ids;
  if (!view.Has(key) || view.value().at(key).is_null()) return ids;
  FR_ASSIGN_OR_RETURN(JsonView field, view.Get(key));
  if (field.value().is_array()) {
    FR_ASSIGN_OR_RETURN(std::vector<JsonView> items, field.AsArray());
    for (const JsonView& item : items) {
      FR_ASSIGN_OR_RETURN(int64_t id, item.AsInt());
      ids.push_back(id);
    }
  } else {
    FR_ASSIGN_OR_RETURN(int64_t id, field.AsInt());
    ids.push_back(id);
  }
  return ids;
}

// Rope settings from either rope_parameters (5.x: theta inside) or
// rope_theta + rope_scaling (4.x).
Status ParseRope(const JsonView& root, RopeConfig* rope) {
  std::optional<JsonView> params;
  if (const char* key = FirstKey(root, {"rope_parameters", "rope_scaling"})) {
    FR_ASSIGN_OR_RETURN(JsonView p, root.GetObject(key));
    params = p;
  }
  if (params && params->Has("rope_theta")) {
    FR_ASSIGN_OR_RETURN(rope->theta, params->GetDouble("rope_theta"));
  } else {
    FR_ASSIGN_OR_RETURN(rope->theta, root.GetDouble("rope_theta", 10000.0));
  }
  if (rope->theta <= 0) return Status::InvalidArgument("rope_theta: must be positive");
  if (!params) return Status::Ok();

  std::string type = "default";
  if (const char* key = FirstKey(*params, {"rope_type", "type"})) {
    FR_ASSIGN_OR_RETURN(type, params->GetString(key));
  }
  if (type == "default") return Status::Ok();
  if (type == "linear") {
    rope->scaling = RopeScalingType::kLinear;
    FR_ASSIGN_OR_RETURN(rope->factor, params->GetDouble("factor"));
  } else if (type == "llama3") {
    rope->scaling = RopeScalingType::kLlama3;
    FR_ASSIGN_OR_RETURN(rope->factor, params->GetDouble("factor"));
    FR_ASSIGN_OR_RETURN(rope->low_freq_factor, params->GetDouble("low_freq_factor"));
    FR_ASSIGN_OR_RETURN(rope->high_freq_factor, params->GetDouble("high_freq_factor"));
    FR_ASSIGN_OR_RETURN(rope->original_max_position_embeddings,
                        params->GetInt("original_max_position_embeddings"));
    if (rope->low_freq_factor <= 0 || rope->high_freq_factor <= rope->low_freq_factor ||
        rope->original_max_position_embeddings <= 0) {
      return Status::InvalidArgument(params->path() +
                                     ": llama3 scaling needs 0 < low_freq_factor < high_freq_factor "
                                     "and a positive original_max_position_embeddings");
    }
  } else {
    return Status::Unimplemented(params->path() + ".rope_type: '" + type +
                                 "' is not supported (default, linear, llama3 are)");
  }
  if (rope->factor <= 0) return Status::InvalidArgument(params->path() + ".factor: must be positive");
  return Status::Ok();
}

Result<ModelConfig> ParseConfigObject(const JsonView& root) {
  FR_RETURN_IF_ERROR(root.ExpectObject());
  ModelConfig c;
  FR_ASSIGN_OR_RETURN(c.architecture, root.GetString("model_type"));
  FR_ASSIGN_OR_RETURN(c.vocab_size, PositiveInt(root, "vocab_size"));
  FR_ASSIGN_OR_RETURN(c.hidden_size, PositiveInt(root, "hidden_size"));
  FR_ASSIGN_OR_RETURN(c.num_layers, PositiveInt(root, "num_hidden_layers"));
  FR_ASSIGN_OR_RETURN(c.num_heads, PositiveInt(root, "num_attention_heads"));
  c.num_kv_heads = c.num_heads;
  if (FirstKey(root, {"num_key_value_heads"})) {
    FR_ASSIGN_OR_RETURN(c.num_kv_heads, PositiveInt(root, "num_key_value_heads"));
  }
  if (FirstKey(root, {"head_dim"})) {
    FR_ASSIGN_OR_RETURN(c.head_dim, PositiveInt(root, "head_dim"));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return Status::InvalidArgument("hidden_size: " + std::to_string(c.hidden_size) +
                                     " is not divisible by num_attention_heads " +
                                     std::to_string(c.num_heads) + " and head_dim is not given");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  FR_ASSIGN_OR_RETURN(c.intermediate_size, root.GetInt("intermediate_size", 0));
  FR_ASSIGN_OR_RETURN(c.max_position_embeddings, root.GetInt("max_position_embeddings", 0));
  FR_ASSIGN_OR_RETURN(c.rms_norm_eps, root.GetDouble("rms_norm_eps", 1e-6));
  FR_ASSIGN_OR_RETURN(c.tie_word_embeddings, root.GetBool("tie_word_embeddings", false));
  if (const char* key = FirstKey(root, {"attention_bias", "qkv_bias"})) {
    FR_ASSIGN_OR_RETURN(bool bias, root.GetBool(key));
    c.attention_bias = bias;
  }
  FR_RETURN_IF_ERROR(ParseRope(root, &c.rope));

  FR_ASSIGN_OR_RETURN(std::string act, root.GetString("hidden_act", "silu"));
  if (act != "silu") {
    return Status::Unimplemented("hidden_act: '" + act + "' is not supported (silu is)");
  }
  FR_ASSIGN_OR_RETURN(bool mlp_bias, root.GetBool("mlp_bias", false));
  if (mlp_bias) return Status::Unimplemented("mlp_bias: FFN biases are not supported");
  FR_ASSIGN_OR_RETURN(bool sliding, root.GetBool("use_sliding_window", false));
  if (sliding) return Status::Unimplemented("use_sliding_window: sliding-window attention is not supported");

  if (const char* key = FirstKey(root, {"num_experts", "num_local_experts"})) {
    FR_ASSIGN_OR_RETURN(c.num_experts, root.GetInt(key));
    if (c.num_experts < 0) return Status::InvalidArgument(std::string(key) + ": must not be negative");
  }
  FR_ASSIGN_OR_RETURN(c.num_experts_per_tok, root.GetInt("num_experts_per_tok", 0));
  FR_ASSIGN_OR_RETURN(c.moe_intermediate_size, root.GetInt("moe_intermediate_size", 0));
  FR_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                      root.GetInt("shared_expert_intermediate_size", 0));
  FR_ASSIGN_OR_RETURN(c.decoder_sparse_step, root.GetInt("decoder_sparse_step", 1));
  FR_ASSIGN_OR_RETURN(c.norm_topk_prob, root.GetBool("norm_topk_prob", false));
  if (FirstKey(root, {"mlp_only_layers"})) {
    FR_ASSIGN_OR_RETURN(std::vector<JsonView> layers, root.GetArray("mlp_only_layers"));
    for (const JsonView& layer : layers) {
      FR_ASSIGN_OR_RETURN(int64_t id, layer.AsInt());
      c.mlp_only_layers.push_back(id);
    }
  }

  if (FirstKey(root, {"bos_token_id"})) {
    FR_ASSIGN_OR_RETURN(int64_t bos, root.GetInt("bos_token_id"));
    c.bos_token_id = bos;
  }
  FR_ASSIGN_OR_RETURN(c.eos_token_ids, TokenIds(root, "eos_token_id"));
  if (const char* key = FirstKey(root, {"dtype", "torch_dtype"})) {
    FR_ASSIGN_OR_RETURN(c.dtype, root.GetString(key));
  }
  return c;
}

}  // namespace

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (num_experts == 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

Result<ModelConfig> ParseHfConfig(const Json& config, const std::string& what) {
  Result<ModelConfig> parsed = ParseConfigObject(JsonView(config, ""));
  if (!parsed.ok()) return parsed.status().Wrap(what);
  return parsed;
}

Status ApplyGenerationConfig(const Json& generation, const std::string& what, ModelConfig* config) {
  JsonView root(generation, "");
  Status st = root.ExpectObject();
  if (st.ok() && FirstKey(root, {"eos_token_id"})) {
    Result<std::vector<int64_t>> eos = TokenIds(root, "eos_token_id");
    if (eos.ok()) {
      config->eos_token_ids = *eos;
    } else {
      st = eos.status();
    }
  }
  if (st.ok() && FirstKey(root, {"bos_token_id"})) {
    Result<int64_t> bos = root.GetInt("bos_token_id");
    if (bos.ok()) {
      config->bos_token_id = *bos;
    } else {
      st = bos.status();
    }
  }
  return st.ok() ? st : st.Wrap(what);
}

Result<ModelConfig> ReadHfConfig(const std::string& dir) { return ReadHfConfig(dir, MapFilesIn(dir)); }

Result<ModelConfig> ReadHfConfig(const std::string& dir, const DirectoryFileMapper& map) {
  auto read = [](const MappedFile& file) {
    return ParseJson(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), file.path());
  };
  const std::string path = dir + "/config.json";
  FR_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, map("config.json"));
  FR_ASSIGN_OR_RETURN(Json json, read(*file));
  FR_ASSIGN_OR_RETURN(ModelConfig config, ParseHfConfig(json, path));
  Result<std::unique_ptr<MappedFile>> gen_file = map("generation_config.json");
  if (gen_file.ok()) {
    FR_ASSIGN_OR_RETURN(Json gen, read(**gen_file));
    FR_RETURN_IF_ERROR(ApplyGenerationConfig(gen, dir + "/generation_config.json", &config));
  } else if (gen_file.status().code() != Code::kNotFound) {
    return gen_file.status();
  }
  FR_RETURN_IF_ERROR(ValidateModelConfig(config, path));
  return config;
}

Status ValidateModelConfig(const ModelConfig& c, const std::string& what) {
  auto bad = [&](const std::string& msg) { return Status::InvalidArgument(what + ": " + msg); };
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.head_dim <= 0) {
    return bad("vocab_size, hidden_size, num_hidden_layers, num_attention_heads, "
               "num_key_value_heads and head_dim must all be positive");
  }
  // Far above any real model; a lying config must not make validation or the
  // loader loop for hours (found by fuzz/hf_config_fuzz.cc).
  constexpr int64_t kMaxLayers = 1 << 16;
  if (c.num_layers > kMaxLayers) {
    return bad("num_hidden_layers " + std::to_string(c.num_layers) + " is larger than " +
               std::to_string(kMaxLayers));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return bad("num_attention_heads " + std::to_string(c.num_heads) +
               " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) return bad("head_dim " + std::to_string(c.head_dim) + " must be even for RoPE");
  if (!(c.rms_norm_eps > 0)) return bad("rms_norm_eps must be positive");
  bool any_dense = c.num_experts == 0;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (!c.IsMoeLayer(layer)) any_dense = true;
  }
  if (any_dense && c.intermediate_size <= 0) return bad("intermediate_size must be positive");
  if (c.num_experts > 0) {
    if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts) {
      return bad("num_experts_per_tok " + std::to_string(c.num_experts_per_tok) +
                 " must be in 1.." + std::to_string(c.num_experts));
    }
    if (c.moe_intermediate_size <= 0) return bad("moe_intermediate_size must be positive");
    if (c.decoder_sparse_step <= 0) return bad("decoder_sparse_step must be positive");
    if (c.shared_expert_intermediate_size < 0) return bad("shared_expert_intermediate_size must not be negative");
  }
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return bad("eos_token_id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  return Status::Ok();
}

}  // namespace flashroll::engine
