// Checkpoints loaded beneath a root for a running model: a copy of the
// shipped model loads and computes as the original does; every escape
// (absolute, "..", a symlink out, a weights file that is a FIFO or a link
// to a device) is PermissionDenied; a config field, a tensor's shape or
// dtype, a missing or an extra tensor that differs is InvalidArgument naming
// it; a truncated file is InvalidArgument too.
#include "engine/models/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>

#include <gtest/gtest.h>

#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

using testing::CopyCheckpoint;
using testing::EditSafetensorsHeader;
using testing::ReadWholeFile;
using testing::TempDir;
using testing::WriteWholeFile;

const Model& Running() {
  static const Model* model = [] {
    auto loaded = Model::Load("models/default");
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    return loaded->release();
  }();
  return *model;
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

}  // namespace
}  // namespace flashroll::engine
