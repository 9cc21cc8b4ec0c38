// The GPU memory a model needs (device_memory.h), from its tensor index: the
// CUDA backend's upload rule (engine/cuda/device_weights.cc: bf16 matrices
// kept, every other type expanded to f32, norms, biases and the shared
// expert's gate f32, q/k/v and gate/up stacked, a MoE layer's experts in two
// stacks) recomputed here tensor by tensor, the way Upload walks the model,
// on f32 and bf16 safetensors (dense and MoE) and f32, f16 and q8_0 GGUF
// files.
#include "engine/device/device_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/json.h"
#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

using testing::ReadWholeFile;
using testing::TempDir;
using testing::WriteWholeFile;

// What DeviceWeights::Upload copies, walking the model as it does.
int64_t UploadedBytes(const ModelFiles& files) {
  const ModelConfig& c = files.config();
  auto stacked = [&](const std::vector<std::string>& names) {
    int64_t elements = 0;
    bool bf16 = true;
    for (const std::string& name : names) {
      const WeightTensor* t = files.Find(name);
      EXPECT_NE(t, nullptr) << name;
      if (t == nullptr) return int64_t{0};
      elements += NumElements(t->shape);
      bf16 = bf16 && t->dtype == kernels::DType::kBF16;
    }
    return elements * (bf16 ? 2 : 4);
  };
  auto vector = [&](const std::string& name) {
    const WeightTensor* t = files.Find(name);
    EXPECT_NE(t, nullptr) << name;
    return t == nullptr ? 0 : NumElements(t->shape) * 4;
  };
  int64_t total = stacked({"model.embed_tokens.weight"}) + vector("model.norm.weight");
  if (!c.tie_word_embeddings) total += stacked({"lm_head.weight"});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    total += vector(p + "input_layernorm.weight") + vector(p + "post_attention_layernorm.weight");
    total += stacked({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
    total += stacked({p + "self_attn.o_proj.weight"});
    for (const char* extra : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                              "self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
      if (files.Find(p + extra) != nullptr) total += vector(p + extra);
    }
    const bool moe = c.num_experts > 0 && c.IsMoeLayer(l);
    if (!moe) {
      total += stacked({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      total += stacked({p + "mlp.down_proj.weight"});
      continue;
    }
    // Every expert's gate and up in one matrix, every down in another.
    std::vector<std::string> gate_up, down;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string expert = p + "mlp.experts." + std::to_string(e) + ".";
      gate_up.insert(gate_up.end(), {expert + "gate_proj.weight", expert + "up_proj.weight"});
      down.push_back(expert + "down_proj.weight");
    }
    total += stacked({p + "mlp.gate.weight"}) + stacked(gate_up) + stacked(down);
    if (c.shared_expert_intermediate_size > 0) {
      total += stacked({p + "mlp.shared_expert.gate_proj.weight", p + "mlp.shared_expert.up_proj.weight"});
      total += stacked({p + "mlp.shared_expert.down_proj.weight"}) + vector(p + "mlp.shared_expert_gate.weight");
    }
  }
  return total;
}

// Copies the f32 safetensors model `src` to `dst`, with its matrices in bf16
// (norms stay f32, as exported checkpoints keep them) when `bf16`, and with
// an lm_head.weight equal to the embedding when `add_lm_head` (checkpoints
// of tied models that carry both).
void WriteCopy(const std::string& src, const std::string& dst, bool bf16, bool add_lm_head = false) {
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src + "/config.json", dst + "/config.json");
  const std::string bytes = ReadWholeFile(src + "/model.safetensors");
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  Json header = Json::parse(bytes.substr(8, len));
  Json out_header = Json::object();
  std::string data;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    ASSERT_EQ(info["dtype"], "F32") << name;
    const size_t begin = 8 + len + info["data_offsets"][0].get<size_t>();
    const size_t end = 8 + len + info["data_offsets"][1].get<size_t>();
    const bool matrix = bf16 && info["shape"].size() >= 2;
    const size_t at = data.size();
    for (size_t i = begin; i < end; i += 4) data.append(bytes, matrix ? i + 2 : i, matrix ? 2 : 4);  // bf16: high half
    out_header[name] = {{"dtype", matrix ? "BF16" : "F32"}, {"shape", info["shape"]}, {"data_offsets", {at, data.size()}}};
    if (add_lm_head && name == "model.embed_tokens.weight") {
      const std::string embedding = data.substr(at);
      const size_t head_at = data.size();
      data += embedding;
      out_header["lm_head.weight"] = {{"dtype", out_header[name]["dtype"]}, {"shape", info["shape"]},
                                      {"data_offsets", {head_at, data.size()}}};
    }
  }
  const std::string text = out_header.dump();
  std::string file(8, '\0');
  const uint64_t text_len = text.size();
  std::memcpy(file.data(), &text_len, 8);
  WriteWholeFile(dst + "/model.safetensors", file + text + data);
}

int64_t DiskBytes(const std::string& path) {
  int64_t total = 0;
  if (std::filesystem::is_regular_file(path)) return static_cast<int64_t>(std::filesystem::file_size(path));
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

void ExpectUploadRule(const std::string& path) {
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load(path);
  ASSERT_TRUE(files.ok()) << files.status().message();
  const int64_t expected = UploadedBytes(**files);
  EXPECT_GT(expected, 0) << path;
  EXPECT_EQ(CudaWeightBytes(**files), expected) << path;
  Result<int64_t> by_path = CudaWeightBytes(path);
  ASSERT_TRUE(by_path.ok()) << by_path.status().message();
  EXPECT_EQ(*by_path, expected) << path;
  EXPECT_EQ(DeviceWeightBytes(DeviceSpec{DeviceSpec::Kind::kCuda, 0}, path), expected) << path;
}

TEST(DeviceMemoryTest, SafetensorsFollowTheUploadRule) {
  for (const char* model : {"llama", "qwen2", "qwen3", "llama3_tied"}) ExpectUploadRule(std::string("tests/data/parity/") + model);
}

TEST(DeviceMemoryTest, MoeModelsFollowTheUploadRule) {
  for (const char* model : {"qwen3_moe", "qwen3_moe_mixed", "qwen2_moe"}) {
    ExpectUploadRule(std::string("tests/data/parity/") + model);
  }
  ExpectUploadRule("models/default-moe");
  // In bf16 the experts stay bf16 and the shared expert's [1, hidden] gate
  // is still an f32 vector.
  TempDir dir;
  for (const char* model : {"qwen2_moe", "qwen3_moe_mixed"}) {
    const std::string bf16 = dir.path() + "/" + model + "-bf16";
    WriteCopy(std::string("tests/data/parity/") + model, bf16, /*bf16=*/true);
    ExpectUploadRule(bf16);
  }
}

TEST(DeviceMemoryTest, GgufFollowsTheUploadRule) {
  for (const char* model : {"llama.f32", "llama.f16", "llama.q8_0", "llama3_tied.f32", "qwen2.f32"}) {
    ExpectUploadRule(std::string("tests/data/parity-llamacpp/") + model + ".gguf");
  }
}

TEST(DeviceMemoryTest, Bf16MatricesStayBf16) {
  TempDir dir;
  const std::string bf16 = dir.path() + "/qwen3-bf16";
  WriteCopy("tests/data/parity/qwen3", bf16, /*bf16=*/true);
  ExpectUploadRule(bf16);
  // Half the f32 model's bytes, less its f32 norms.
  const int64_t f32 = *CudaWeightBytes("tests/data/parity/qwen3");
  EXPECT_LT(*CudaWeightBytes(bf16), f32 * 6 / 10);
}

// DeviceWeights::Upload points lm_head at the embedding when the config ties
// them, even where the checkpoint also carries an lm_head.weight.
TEST(DeviceMemoryTest, ATiedLmHeadIsStoredOnce) {
  TempDir dir;
  const std::string with_head = dir.path() + "/tied-with-head";
  WriteCopy("tests/data/parity/llama3_tied", with_head, /*bf16=*/false, /*add_lm_head=*/true);
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load(with_head);
  ASSERT_TRUE(files.ok()) << files.status().message();
  ASSERT_TRUE((*files)->config().tie_word_embeddings);
  ASSERT_NE((*files)->Find("lm_head.weight"), nullptr);
  ExpectUploadRule(with_head);
  EXPECT_EQ(*CudaWeightBytes(with_head), *CudaWeightBytes("tests/data/parity/llama3_tied"));
}

// The file size on disk, what CheckDevice was asked for before, undercounts
// whatever the GPU expands to f32.
TEST(DeviceMemoryTest, QuantizedAndF16FilesTakeMoreOnTheGpuThanOnDisk) {
  for (const char* model : {"llama.f16", "llama.q8_0"}) {
    const std::string path = std::string("tests/data/parity-llamacpp/") + model + ".gguf";
    EXPECT_GT(*CudaWeightBytes(path), DiskBytes(path) * 3 / 2) << path;
  }
}

TEST(DeviceMemoryTest, TheCpuNeedsNoIndexAndUnreadableModelsGiveZero) {
  EXPECT_EQ(DeviceWeightBytes(DeviceSpec{}, "tests/data/parity/qwen3"), 0);
  EXPECT_EQ(DeviceWeightBytes(DeviceSpec{DeviceSpec::Kind::kCuda, 0}, "/nonexistent/model"), 0);
  Result<int64_t> missing = CudaWeightBytes("/nonexistent/model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model"), std::string::npos) << missing.status().message();
}

TEST(DeviceMemoryTest, KvPoolIsWholeBf16Blocks) {
  ModelConfig c;  // Qwen3-8B's attention: 36 layers, 8 KV heads of 128
  c.num_layers = 36;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  EXPECT_EQ(KvLayoutOf(c).TokenBytes(), 144 * 1024);
  const int64_t block = 16 * 144 * 1024;
  EXPECT_EQ(KvPoolBytes(c, 10 * block + block / 2), 10 * block);
  EXPECT_EQ(KvPoolBytes(c, block - 1), 0);
  EXPECT_EQ(KvPoolBytesFor(c, /*context=*/17, /*batch=*/3), 3 * 2 * block);
  EXPECT_EQ(KvPoolBytesFor(c, 16, 1), block);
  EXPECT_EQ(KvPoolBytes(c, block, 16, KvDType::kF32), 0);  // an f32 block is twice as big
}

TEST(DeviceMemoryTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(144 * 1024), "144 KiB");
  EXPECT_EQ(HumanBytes(int64_t{16} * (1 << 30) + (int64_t{4} << 30) / 10), "16.4 GiB");
  EXPECT_EQ(HumanBytes(1536 * 1024), "1.5 MiB");
}

}  // namespace
}  // namespace flashroll::engine
