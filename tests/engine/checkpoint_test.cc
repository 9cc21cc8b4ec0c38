// Checkpoints loaded beneath a root for a running model: a copy of the
// shipped model loads and computes as the original does; every escape
// (absolute, "..", a symlink out, a weights file that is a FIFO or a link
// to a device) is PermissionDenied; a config field, a tensor's shape or
// dtype, a missing or an extra tensor that differs is InvalidArgument naming
// it; a truncated file is InvalidArgument too. Every config setting a
// family reads is compared (dense and MoE), and a manifest's dtypes, shapes,
// sizes and checksums are checked against the files.
#include "engine/models/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

using testing::CopyCheckpoint;
using testing::EditSafetensorsHeader;
using testing::ReadWholeFile;
using testing::TempDir;
using testing::WriteWholeFile;

// Each shipped model loaded once for the whole binary, freed at exit.
const Model& Shipped(const std::string& dir) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  std::unique_ptr<Model>& model = models[dir];
  if (model == nullptr) {
    auto loaded = Model::Load(dir);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    model = std::move(loaded).value();
  }
  return *model;
}

const Model& Running() { return Shipped("models/default"); }

void EditJsonFile(const std::string& path, const std::function<void(Json&)>& edit) {
  Result<Json> json = ParseJson(ReadWholeFile(path));
  ASSERT_TRUE(json.ok()) << path << ": " << json.status().ToString();
  edit(*json);
  WriteWholeFile(path, json->dump());
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { CopyCheckpoint("models/default", Root() + "/ckpt"); }
  std::string Root() const { return dir_.path() + "/root"; }

  Status Load(const std::string& dir) { return LoadCheckpointBeneath(Root(), dir, Running()).status(); }

  TempDir dir_;
};

TEST_F(CheckpointTest, ACopyOfTheRunningModelLoadsAndComputesTheSame) {
  Result<std::unique_ptr<Model>> loaded = LoadCheckpointBeneath(Root(), "ckpt", Running());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<int32_t> tokens = {5, 17, 300, 42};
  std::vector<float> a, b;
  KvCache ca = Running().NewCache(), cb = (*loaded)->NewCache();
  ASSERT_TRUE(Running().Forward(tokens, &ca, true, &a).ok());
  ASSERT_TRUE((*loaded)->Forward(tokens, &cb, true, &b).ok());
  EXPECT_EQ(a, b);
}

TEST_F(CheckpointTest, EscapesAreRefused) {
  ASSERT_EQ(::symlink(std::filesystem::absolute("models/default").c_str(), (Root() + "/out").c_str()), 0);
  ASSERT_EQ(::symlink("../../", (Root() + "/up").c_str()), 0);
  for (const std::string& dir : {Root() + "/ckpt", std::string("../root/ckpt"), std::string("ckpt/../.."),
                                 std::string("out"), std::string("up/root/ckpt")}) {
    Status st = Load(dir);
    EXPECT_EQ(st.code(), Code::kPermissionDenied) << dir << ": " << st.ToString();
  }
}

TEST_F(CheckpointTest, AWeightsFileThatIsAFifoOrADeviceIsRefusedAtOnce) {
  const std::string weights = Root() + "/ckpt/model.safetensors";
  ASSERT_EQ(::unlink(weights.c_str()), 0);
  ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [&] { return Load("ckpt"); });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int writer = ::open(weights.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ADD_FAILURE() << "loading a FIFO blocked";
    result.wait();
    if (writer >= 0) ::close(writer);
    return;
  }
  EXPECT_EQ(result.get().code(), Code::kPermissionDenied);
  // A config that links to a device.
  ASSERT_EQ(::unlink(weights.c_str()), 0);
  CopyCheckpoint("models/default", Root() + "/ckpt");
  ASSERT_EQ(::unlink((Root() + "/ckpt/config.json").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", (Root() + "/ckpt/config.json").c_str()), 0);
  Status st = Load("ckpt");
  EXPECT_EQ(st.code(), Code::kPermissionDenied) << st.ToString();
}

TEST_F(CheckpointTest, AMismatchIsInvalidArgumentNamingTheTensorOrField) {
  const std::string weights = Root() + "/ckpt/model.safetensors";
  const std::string original = ReadWholeFile(weights);
  struct Case {
    std::function<void(Json&)> edit;
    std::string expected;
  };
  const Case cases[] = {
      {[](Json& h) { h["model.norm.weight"]["shape"] = {16, 16}; },
       "tensor 'model.norm.weight': shape [16, 16] is not [256]"},
      {[](Json& h) { h["model.norm.weight"]["dtype"] = "F16"; }, "tensor 'model.norm.weight': dtype f16 is not bf16"},
      {[](Json& h) { h["extra.weight"] = h["model.norm.weight"]; h.erase("model.norm.weight"); },
       "tensor 'model.norm.weight' is missing"},
  };
  for (const Case& c : cases) {
    WriteWholeFile(weights, original);
    EditSafetensorsHeader(weights, c.edit);
    Status st = Load("ckpt");
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.ToString();
  }
  // A tensor the running model does not have (empty, at the end of the data).
  WriteWholeFile(weights, original);
  EditSafetensorsHeader(weights, [](Json& h) {
    uint64_t end = 0;
    for (const auto& [name, t] : h.items()) {
      if (name != "__metadata__") end = std::max(end, t["data_offsets"][1].get<uint64_t>());
    }
    h["extra.weight"] = {{"dtype", "BF16"}, {"shape", {0}}, {"data_offsets", {end, end}}};
  });
  Status extra = Load("ckpt");
  EXPECT_NE(extra.message().find("tensor 'extra.weight' is not in the running model"), std::string::npos)
      << extra.ToString();

  // A config field.
  WriteWholeFile(weights, original);
  const std::string config = Root() + "/ckpt/config.json";
  Result<Json> json = ParseJson(ReadWholeFile(config));
  ASSERT_TRUE(json.ok());
  (*json)["max_position_embeddings"] = 2048;
  WriteWholeFile(config, json->dump());
  Status field = Load("ckpt");
  EXPECT_EQ(field.code(), Code::kInvalidArgument);
  EXPECT_NE(field.message().find("config.json: max_position_embeddings: 2048 is not 4096"), std::string::npos)
      << field.ToString();
}

TEST_F(CheckpointTest, ATruncatedWeightsFileIsInvalidArgument) {
  const std::string weights = Root() + "/ckpt/model.safetensors";
  const std::string original = ReadWholeFile(weights);
  WriteWholeFile(weights, original.substr(0, original.size() / 2));
  Status st = Load("ckpt");
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
}

// A setting the families read, changed in a copy of a shipped model: what
// the check must name. A check of the seven sizes alone let a checkpoint with
// another top-k routing, rope or norm epsilon in, and it served garbled
// output.
struct SettingCase {
  const char* model;
  const char* file;  // config.json or generation_config.json
  std::function<void(Json&)> edit;
  const char* param;
};

TEST(CheckpointSettingsTest, EverySettingAFamilyReadsIsComparedAndNamed) {
  const SettingCase cases[] = {
      {"models/default-moe", "config.json", [](Json& c) { c["num_experts_per_tok"] = 4; }, "num_experts_per_tok"},
      {"models/default-moe", "config.json", [](Json& c) { c["norm_topk_prob"] = false; }, "norm_topk_prob"},
      {"models/default-moe", "config.json", [](Json& c) { c["decoder_sparse_step"] = 2; }, "decoder_sparse_step"},
      {"models/default-moe", "config.json", [](Json& c) { c["mlp_only_layers"] = {0}; }, "mlp_only_layers"},
      {"models/default-moe", "config.json", [](Json& c) { c["moe_intermediate_size"] = 64; }, "moe_intermediate_size"},
      {"models/default-moe", "config.json", [](Json& c) { c["num_local_experts"] = 4; }, "num_experts"},
      {"models/default", "config.json", [](Json& c) { c["rope_parameters"]["rope_theta"] = 1000000.0; }, "rope_theta"},
      {"models/default", "config.json",
       [](Json& c) { c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 10000.0}}; },
       "rope_scaling.rope_type"},
      {"models/default", "config.json", [](Json& c) { c["rms_norm_eps"] = 1e-5; }, "rms_norm_eps"},
      {"models/default", "config.json", [](Json& c) { c["tie_word_embeddings"] = false; }, "tie_word_embeddings"},
      {"models/default", "config.json", [](Json& c) { c["attention_bias"] = true; }, "attention_bias"},
      {"models/default", "config.json", [](Json& c) { c["intermediate_size"] = 512; }, "intermediate_size"},
      {"models/default", "generation_config.json", [](Json& c) { c["eos_token_id"] = {2, 7}; }, "eos_token_id"},
      {"models/default", "config.json", [](Json& c) { c["hidden_act"] = "gelu"; }, "hidden_act"},
      {"models/default", "config.json", [](Json& c) { c["use_sliding_window"] = true; }, "use_sliding_window"},
  };
  for (const SettingCase& c : cases) {
    TempDir dir;
    CopyCheckpoint(c.model, dir.path() + "/ckpt");
    EditJsonFile(dir.path() + "/ckpt/" + c.file, c.edit);
    Result<std::unique_ptr<ConfinedRoot>> root = ConfinedRoot::Open(dir.path());
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    CheckpointProblem problem;
    Result<OpenedCheckpoint> opened = OpenCheckpointBeneath(**root, "ckpt", WeightLayout::Of(Shipped(c.model)), &problem);
    EXPECT_EQ(opened.status().code(), Code::kInvalidArgument) << c.param << ": " << opened.status().ToString();
    EXPECT_EQ(problem.param, c.param) << opened.status().ToString();
    EXPECT_NE(opened.status().message().find(std::string(c.param) + ":"), std::string::npos)
        << c.param << ": " << opened.status().ToString();
  }
}

TEST(CheckpointSettingsTest, TheEngineRefusesASwapToAModelWithOtherSettings) {
  // Engine::SwapWeights, for callers that build a model themselves, runs the
  // same check as the HTTP route.
  TempDir dir;
  CopyCheckpoint("models/default-moe", dir.path() + "/ckpt");
  EditJsonFile(dir.path() + "/ckpt/config.json", [](Json& c) { c["num_experts_per_tok"] = 4; });
  Result<std::unique_ptr<Model>> other = Model::Load(dir.path() + "/ckpt");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EngineOptions options;
  options.threads = 1;
  options.kv_memory_bytes = 8ll << 20;
  Result<std::unique_ptr<Engine>> engine = Engine::Start(Shipped("models/default-moe"), nullptr, options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Status swapped = (*engine)->SwapWeights(std::move(other).value(), 1);
  EXPECT_EQ(swapped.code(), Code::kInvalidArgument) << swapped.ToString();
  EXPECT_NE(swapped.message().find("num_experts_per_tok: 4 is not 2"), std::string::npos) << swapped.ToString();
  EXPECT_EQ((*engine)->weight_version(), 0);
}

class CheckpointManifestTest : public CheckpointTest {
 protected:
  std::string Weights() const { return Root() + "/ckpt/model.safetensors"; }
  std::string ManifestFile() const { return Root() + "/ckpt/manifest.json"; }
  void WriteManifest(const std::function<void(Json&)>& edit = [](Json&) {}) {
    Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load(Root() + "/ckpt");
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    Result<Json> manifest = ManifestJson(**files);
    ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
    edit(*manifest);
    WriteWholeFile(ManifestFile(), manifest->dump());
  }
  Result<OpenedCheckpoint> Open(CheckpointProblem* problem) {
    Result<std::unique_ptr<ConfinedRoot>> root = ConfinedRoot::Open(Root());
    EXPECT_TRUE(root.ok()) << root.status().ToString();
    return OpenCheckpointBeneath(**root, "ckpt", WeightLayout::Of(Running()), problem);
  }
};

TEST_F(CheckpointManifestTest, AManifestOfTheFilesLoads) {
  WriteManifest();
  Result<std::unique_ptr<Model>> loaded = LoadCheckpointBeneath(Root(), "ckpt", Running());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  // The digest is of the tensor's bytes exactly as the file holds them.
  const WeightTensor& norm = (*loaded)->files().tensors().at("model.norm.weight");
  Sha256 sha;
  sha.Update(norm.data, 256 * 2);
  Result<Json> manifest = ParseJson(ReadWholeFile(ManifestFile()));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ((*manifest)["tensors"]["model.norm.weight"]["sha256"], sha.HexDigest().value());
  EXPECT_EQ((*manifest)["tensors"]["model.norm.weight"]["bytes"], 512);
  EXPECT_EQ((*manifest)["tensors"]["model.norm.weight"]["dtype"], "BF16");
}

TEST_F(CheckpointManifestTest, AManifestThatDisagreesWithTheHeadersIsRefusedBeforeAnyByteIsRead) {
  struct Case {
    std::function<void(Json&)> edit;
    std::string expected;
  };
  const Case cases[] = {
      {[](Json& m) { m["tensors"]["model.norm.weight"]["shape"] = {128}; }, "is not the manifest's [128]"},
      {[](Json& m) { m["tensors"]["model.norm.weight"]["dtype"] = "F32"; }, "dtype bf16 is not the manifest's f32"},
      {[](Json& m) { m["tensors"]["model.norm.weight"]["bytes"] = 1024; }, "512 bytes is not the manifest's 1024"},
      {[](Json& m) { m["tensors"].erase("model.norm.weight"); }, "tensor 'model.norm.weight' is not listed"},
      {[](Json& m) { m["tensors"]["extra.weight"] = m["tensors"]["model.norm.weight"]; },
       "tensor 'extra.weight' is not in the checkpoint's weights"},
      {[](Json& m) { m["tensors"]["model.norm.weight"]["sha256"] = "ABC"; }, "sha256: not 64 lowercase hex digits"},
  };
  for (const Case& c : cases) {
    WriteManifest(c.edit);
    CheckpointProblem problem;
    Result<OpenedCheckpoint> opened = Open(&problem);
    EXPECT_EQ(opened.status().code(), Code::kInvalidArgument) << c.expected << ": " << opened.status().ToString();
    EXPECT_NE(opened.status().message().find(c.expected), std::string::npos) << opened.status().ToString();
    EXPECT_NE(problem.param, "") << c.expected;
  }
}

TEST_F(CheckpointManifestTest, BytesThatDifferFromTheManifestFailTheLoadNamingTheTensor) {
  WriteManifest();
  // Flip one byte of the last tensor's data (the header is unchanged).
  std::string bytes = ReadWholeFile(Weights());
  bytes[bytes.size() - 3] ^= 0x40;
  WriteWholeFile(Weights(), bytes);
  CheckpointProblem problem;
  Result<OpenedCheckpoint> opened = Open(&problem);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();  // stage 1 reads no tensor byte
  Result<std::unique_ptr<Model>> built = BuildCheckpoint(std::move(opened).value());
  EXPECT_EQ(built.status().code(), Code::kInvalidArgument) << built.status().ToString();
  EXPECT_NE(built.status().message().find("sha256"), std::string::npos) << built.status().ToString();
  EXPECT_NE(built.status().message().find("is not the manifest's"), std::string::npos) << built.status().ToString();
}

}  // namespace
}  // namespace flashroll::engine
