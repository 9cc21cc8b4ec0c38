// ModelFiles: HF directories (single file, sharded, stacked experts) load
// into mapped tensors under HF names; shape checks name file and tensor.
// GGUF loading is covered by model_gguf_test.cc.
#include "engine/format/model_loader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/json.h"
#include "engine/kernels/dtype.h"
#include "engine/models/model.h"
#include "tests/test_files.h"

namespace flashroll::engine {
namespace {

using flashroll::testing::ReadFile;

TEST(ModelFilesTest, ShardedDirectoryLoadsEveryTensorMapped) {
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load("tests/data/parity/llama");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ((*files)->format(), "safetensors");
  // 2 layers x 9 tensors + embed, norm, lm_head.
  EXPECT_EQ((*files)->tensors().size(), 21u);
  Result<const WeightTensor*> head = (*files)->Get("lm_head.weight", {300, 64});
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_NE((*head)->file.find("model-00004-of-00004.safetensors"), std::string::npos);
  Result<const WeightTensor*> wrong = (*files)->Get("lm_head.weight", {301, 64});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("model-00004-of-00004.safetensors: tensor 'lm_head.weight': shape "
                                          "[300, 64] does not match the config's [301, 64]"),
            std::string::npos)
      << wrong.status().message();
}

TEST(ModelFilesTest, StackedExpertsBecomePerExpertViews) {
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load("tests/data/parity/qwen3_moe_mixed");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  const WeightTensor* gate = (*files)->Find("model.layers.0.mlp.experts.5.gate_proj.weight");
  const WeightTensor* up = (*files)->Find("model.layers.0.mlp.experts.5.up_proj.weight");
  const WeightTensor* down = (*files)->Find("model.layers.2.mlp.experts.0.down_proj.weight");
  ASSERT_NE(gate, nullptr);
  ASSERT_NE(up, nullptr);
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(down->shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(up->data - gate->data, 32 * 64 * 4);  // views into one mapping, no copies
  EXPECT_EQ((*files)->Find("model.layers.1.mlp.experts.0.gate_proj.weight"), nullptr);  // dense layer
}

TEST(ModelFilesTest, MissingWeightsAndUnknownPathsAreNamed) {
  Result<std::unique_ptr<ModelFiles>> none = ModelFiles::Load("tests/data/parity/no-such-model");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_NE(none.status().message().find("tests/data/parity/no-such-model"), std::string::npos);

  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load("tests/data/parity/qwen2");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  Result<const WeightTensor*> head = (*files)->Get("lm_head.weight", {300, 96});  // qwen2 ties embeddings
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().message(), "tests/data/parity/qwen2: tensor 'lm_head.weight' is missing");
}

// Rewrites a float32 fixture with every tensor stored as `dtype` ("BF16" or
// "F16"), the way most hub checkpoints are stored, in a single safetensors file.
void WriteHalfPrecisionCopy(const std::string& fixture, const std::string& dtype, const std::string& dir) {
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load(fixture);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  Json header = Json::object();
  std::string data;
  for (const auto& [name, t] : (*files)->tensors()) {
    ASSERT_EQ(t.dtype, kernels::DType::kF32);
    const int64_t n = NumElements(t.shape);
    const size_t begin = data.size();
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, t.data + 4 * i, 4);
      const uint16_t h = dtype == "BF16" ? kernels::F32ToBf16(v) : kernels::F32ToF16(v);
      data.append(reinterpret_cast<const char*>(&h), 2);
    }
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8) text.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << out << text << data;
  std::ofstream(dir + "/config.json", std::ios::binary) << ReadFile(fixture + "/config.json");
}

TEST(ModelFilesTest, HalfPrecisionSafetensorsRunCloseToTheReference) {
  // RMS logit error bounds: about twice what these tiny models show (bf16 5e-3, f16 6e-4).
  const std::pair<const char*, double> kCases[] = {{"BF16", 1.2e-2}, {"F16", 1.5e-3}};
  for (const auto& [dtype, bound] : kCases) {
    const std::string dir = ::testing::TempDir() + "model_loader_test_" + dtype + std::to_string(::getpid());
    WriteHalfPrecisionCopy("tests/data/parity/qwen2_moe", dtype, dir);
    Result<std::unique_ptr<Model>> model = Model::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->WeightDType(), dtype == std::string("BF16") ? "bf16" : "f16");
    Result<Json> ref = ReadJsonFile("tests/data/parity/qwen2_moe/reference.json");
    ASSERT_TRUE(ref.ok());
    const std::string blob = ReadFile("tests/data/parity/qwen2_moe/logits.bin");
    const Json& prompt = (*ref)["prompts"][1];
    std::vector<int32_t> tokens;
    for (const Json& t : prompt["tokens"]) tokens.push_back(t.get<int32_t>());
    KvCache cache = (*model)->NewCache();
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(tokens, &cache, true, &logits).ok());
    double sum_sq = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      float want;
      std::memcpy(&want, blob.data() + 4 * (prompt["offset"].get<size_t>() + i), 4);
      sum_sq += (logits[i] - want) * (logits[i] - want);
    }
    const double rms = std::sqrt(sum_sq / static_cast<double>(logits.size()));
    EXPECT_LE(rms, bound) << dtype;
    EXPECT_GT(rms, 0.0) << dtype;
    ::unlink((dir + "/model.safetensors").c_str());
    ::unlink((dir + "/config.json").c_str());
    ::rmdir(dir.c_str());
  }
}

}  // namespace
}  // namespace flashroll::engine
