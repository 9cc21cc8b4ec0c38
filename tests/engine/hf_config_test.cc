#include "engine/format/hf_config.h"

#include <gtest/gtest.h>

namespace flashroll::engine {
namespace {

Json ParseConfigJson(const std::string& text) {
  Result<Json> j = ParseJson(text);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : Json();
}

// A Qwen3-MoE config as transformers 4.x writes it.
const char* kQwen3Moe4x = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
  "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": null,
  "max_position_embeddings": 40960, "tie_word_embeddings": false,
  "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
  "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
  "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
  "hidden_act": "silu", "use_sliding_window": false})";

// The same model as transformers 5.x writes it.
const char* kQwen3Moe5x = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
  "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "max_position_embeddings": 40960, "tie_word_embeddings": false,
  "num_local_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
  "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
  "bos_token_id": 151643, "eos_token_id": 151645, "dtype": "bfloat16"})";

TEST(HfConfigTest, Transformers4And5SpellingsGiveTheSameConfig) {
  for (const char* text : {kQwen3Moe4x, kQwen3Moe5x}) {
    Result<ModelConfig> c = ParseHfConfig(ParseConfigJson(text), "config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->architecture, "qwen3_moe");
    EXPECT_EQ(c->num_experts, 128);
    EXPECT_EQ(c->num_experts_per_tok, 8);
    EXPECT_EQ(c->moe_intermediate_size, 768);
    EXPECT_TRUE(c->norm_topk_prob);
    EXPECT_DOUBLE_EQ(c->rope.theta, 1000000.0);
    EXPECT_EQ(c->rope.scaling, RopeScalingType::kNone);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->num_kv_heads, 4);
    EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151645});
    EXPECT_EQ(c->dtype, "bfloat16");
    EXPECT_TRUE(c->IsMoeLayer(0));
    EXPECT_TRUE(ValidateModelConfig(*c, "config.json").ok());
  }
}

TEST(HfConfigTest, Llama3RopeScalingInBothSpellings) {
  const char* v4 = R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "eos_token_id": [128001, 128008, 128009]})";
  const char* v5 = R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rope_parameters": {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                        "rope_type": "llama3"},
    "eos_token_id": [128001, 128008, 128009]})";
  for (const char* text : {v4, v5}) {
    Result<ModelConfig> c = ParseHfConfig(ParseConfigJson(text), "config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->rope.scaling, RopeScalingType::kLlama3);
    EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
    EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
    EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
    EXPECT_EQ(c->head_dim, 128);  // hidden / heads when head_dim is absent
    EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
    EXPECT_FALSE(c->attention_bias.has_value());
  }
}

TEST(HfConfigTest, OldRopeScalingTypeKeyAndQkvBias) {
  Result<ModelConfig> c = ParseHfConfig(ParseConfigJson(R"({"model_type": "qwen2_moe", "vocab_size": 10,
    "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 4, "qkv_bias": true,
    "shared_expert_intermediate_size": 8, "rope_scaling": {"type": "linear", "factor": 2.0}})"),
                                        "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.scaling, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->attention_bias, std::optional<bool>(true));
  EXPECT_EQ(c->shared_expert_intermediate_size, 8);
}

TEST(HfConfigTest, MlpOnlyLayersAndSparseStep) {
  ModelConfig c;
  c.num_experts = 4;
  c.decoder_sparse_step = 2;
  c.mlp_only_layers = {3};
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_FALSE(c.IsMoeLayer(3));
  EXPECT_TRUE(c.IsMoeLayer(5));
}

TEST(HfConfigTest, ErrorsNameTheFileAndKey) {
  Result<ModelConfig> missing = ParseHfConfig(
      ParseConfigJson(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1})"),
      "m/config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "m/config.json: num_attention_heads: missing");

  Result<ModelConfig> wrong_type = ParseHfConfig(
      ParseConfigJson(R"({"model_type": "llama", "vocab_size": "ten", "hidden_size": 8})"), "m/config.json");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("m/config.json: vocab_size"), std::string::npos)
      << wrong_type.status().message();

  Result<ModelConfig> rope = ParseHfConfig(
      ParseConfigJson(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "num_attention_heads": 2, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})"),
      "m/config.json");
  ASSERT_FALSE(rope.ok());
  EXPECT_EQ(rope.status().code(), Code::kUnimplemented);
  EXPECT_NE(rope.status().message().find("rope_scaling.rope_type: 'yarn'"), std::string::npos)
      << rope.status().message();
}

TEST(HfConfigTest, ValidationNamesTheField) {
  Result<ModelConfig> c = ParseHfConfig(
      ParseConfigJson(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "intermediate_size": 16, "num_attention_heads": 4, "num_key_value_heads": 3})"),
      "config.json");
  ASSERT_TRUE(c.ok());
  Status st = ValidateModelConfig(*c, "config.json");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("num_key_value_heads 3"), std::string::npos) << st.message();
}

// Regression (found by fuzz/hf_config_fuzz.cc): a huge layer count made
// validation loop for hours.
TEST(HfConfigTest, AbsurdLayerCountIsRejectedAtOnce) {
  Result<ModelConfig> c = ParseHfConfig(
      ParseConfigJson(R"({"model_type": "qwen3_moe", "vocab_size": 300, "hidden_size": 64,
                "num_hidden_layers": 2000000000000000000, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
                "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32})"),
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Status st = ValidateModelConfig(*c, "config.json");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("num_hidden_layers 2000000000000000000 is larger than"), std::string::npos)
      << st.message();
}

TEST(HfConfigTest, GenerationConfigOverridesEos) {
  Result<ModelConfig> c = ParseHfConfig(
      ParseConfigJson(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "intermediate_size": 16, "num_attention_heads": 2, "eos_token_id": 2})"),
      "config.json");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(ApplyGenerationConfig(ParseConfigJson(R"({"eos_token_id": [3, 4], "bos_token_id": 1})"),
                                    "generation_config.json", &*c)
                  .ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(c->bos_token_id, std::optional<int64_t>(1));
  Status bad = ApplyGenerationConfig(ParseConfigJson(R"({"eos_token_id": "x"})"), "g.json", &*c);
  EXPECT_NE(bad.message().find("g.json: eos_token_id"), std::string::npos) << bad.message();
}

TEST(HfConfigTest, ReadsTheFixtureDirectory) {
  Result<ModelConfig> c = ReadHfConfig("tests/data/parity/llama3_tied");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->rope.scaling, RopeScalingType::kLlama3);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{7});
  Result<ModelConfig> none = ReadHfConfig("tests/data/parity/no-such-model");
  EXPECT_EQ(none.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace flashroll::engine
