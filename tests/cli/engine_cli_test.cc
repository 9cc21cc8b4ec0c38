// End-to-end tests of `flashroll logits`, `generate` and `model-info` on the
// parity fixtures: the JSON contract of issue 3, agreement with the
// transformers reference, and one-line exit-2 errors for bad model files.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/run_flashroll.h"
#include "tests/test_files.h"

namespace {

using flashroll::testing::OneLine;
using flashroll::testing::ReadFile;
using flashroll::testing::WriteFile;

using flashroll::testing::CommandResult;
using Json = nlohmann::json;

using flashroll::testing::Flashroll;

Json Reference(const std::string& fixture) {
  return Json::parse(ReadFile("tests/data/parity/" + fixture + "/reference.json"));
}

std::string TokenArg(const Json& tokens) {
  std::string out;
  for (const Json& t : tokens) out += (out.empty() ? "" : " ") + std::to_string(t.get<int>());
  return "\"" + out + "\"";
}

const char* const kFixtureFiles[] = {"config.json", "generation_config.json", "model.safetensors"};

// A copy of a fixture's files in a fresh directory (for corrupting), removed on destruction.
class FixtureCopy {
 public:
  FixtureCopy(const std::string& fixture, const std::string& name)
      : dir_(::testing::TempDir() + "engine_cli_" + name + "_" + std::to_string(::getpid())) {
    ::mkdir(dir_.c_str(), 0755);
    for (const char* file : kFixtureFiles) {
      WriteFile(dir_ + "/" + file, ReadFile("tests/data/parity/" + fixture + "/" + file));
    }
  }
  ~FixtureCopy() {
    for (const char* file : kFixtureFiles) ::unlink((dir_ + "/" + file).c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Exactly one line of output.
TEST(EngineCliTest, LogitsPrintsEveryPositionAndMatchesTheReference) {
  const Json ref = Reference("qwen2");
  const Json& prompt = ref["prompts"][1];  // 5 tokens
  CommandResult r = Flashroll("logits --model tests/data/parity/qwen2 --tokens " + TokenArg(prompt["tokens"]));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json out = Json::parse(r.output);
  ASSERT_EQ(out.size(), 1u);
  const Json& logits = out["logits"];
  ASSERT_EQ(logits.size(), prompt["tokens"].size());
  const std::string blob = ReadFile("tests/data/parity/qwen2/logits.bin");
  const size_t offset = prompt["offset"].get<size_t>();
  for (size_t i = 0; i < logits.size(); ++i) {
    ASSERT_EQ(logits[i].size(), 300u);
    for (size_t j = 0; j < 300; ++j) {
      float want;
      std::memcpy(&want, blob.data() + 4 * (offset + i * 300 + j), 4);
      ASSERT_NEAR(logits[i][j].get<double>(), want, 1e-3) << "position " << i << " token " << j;
    }
  }
}

TEST(EngineCliTest, RoutingIsIndexedLayerPositionK) {
  const Json ref = Reference("qwen3_moe");
  const Json& prompt = ref["prompts"][2];  // 33 tokens
  CommandResult r =
      Flashroll("logits --model tests/data/parity/qwen3_moe --routing --tokens " + TokenArg(prompt["tokens"]));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json out = Json::parse(r.output);
  EXPECT_EQ(out["logits"].size(), 33u);
  EXPECT_EQ(out["routing"], prompt["routing"]);
  EXPECT_EQ(out["routing"].size(), 2u);
  EXPECT_EQ(out["routing"][1][32].size(), 2u);
}

TEST(EngineCliTest, GreedyGenerateJsonMatchesTheReference) {
  for (const char* fixture : {"llama3_tied", "qwen3_moe_mixed"}) {
    const Json ref = Reference(fixture);
    for (const Json& g : ref["greedy"]) {
      CommandResult r = Flashroll(std::string("generate --model tests/data/parity/") + fixture + " --tokens " +
                                  TokenArg(g["tokens"]) + " --max-tokens " +
                                  std::to_string(g["max_new_tokens"].get<int>()) + " --temperature 0 --json");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(Json::parse(r.output), (Json{{"tokens", g["output"]}})) << fixture;
    }
  }
}

TEST(EngineCliTest, GenerateStopsOnlyAtAnEosTheModelNames) {
  // qwen3 names no eos: exactly --max-tokens tokens.
  CommandResult r =
      Flashroll("generate --model tests/data/parity/qwen3 --tokens \"5 6 7\" --max-tokens 9 --temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(r.output)["tokens"].size(), 9u);

  // Naming the first greedy token as eos in generation_config.json stops right after it.
  const Json g = Reference("llama3_tied")["greedy"][0];
  const int first = g["output"][0].get<int>();
  FixtureCopy copy("llama3_tied", "eos");
  const std::string& dir = copy.dir();
  WriteFile(dir + "/generation_config.json", "{\"eos_token_id\": " + std::to_string(first) + "}");
  r = Flashroll("generate --model " + dir + " --tokens " + TokenArg(g["tokens"]) +
                " --max-tokens 10 --temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(r.output), (Json{{"tokens", {first}}}));
}

TEST(EngineCliTest, TokensTakeAnyRunOfSeparators) {
  const std::string plain =
      Flashroll("generate --model tests/data/parity/qwen3 --tokens \"5 6 7\" --max-tokens 4 --temperature 0 --json")
          .output;
  CommandResult r = Flashroll(
      "generate --model tests/data/parity/qwen3 --tokens \" 5,  6,\t7 \" --max-tokens 4 --temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, plain);
}

TEST(EngineCliTest, ZeroMaxTokensGeneratesNothing) {
  CommandResult r =
      Flashroll("generate --model tests/data/parity/qwen3 --tokens \"5 6 7\" --max-tokens 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(r.output), (Json{{"tokens", Json::array()}}));
}

// JSON has no infinities or NaN: a logit that is not finite prints as null,
// and the document still parses.
TEST(EngineCliTest, LogitsThatAreNotFinitePrintAsNull) {
  FixtureCopy copy("qwen3", "nonfinite");
  const std::string path = copy.dir() + "/model.safetensors";
  std::string weights = ReadFile(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, weights.data(), sizeof(header_size));
  const Json header = Json::parse(weights.substr(8, header_size));
  const Json& norm = header.at("model.norm.weight");
  ASSERT_EQ(norm.at("dtype"), "F32");
  const size_t begin = 8 + header_size + norm.at("data_offsets")[0].get<size_t>();
  const size_t end = 8 + header_size + norm.at("data_offsets")[1].get<size_t>();
  const float inf = INFINITY;
  for (size_t at = begin; at < end; at += sizeof(float)) std::memcpy(&weights[at], &inf, sizeof(float));
  WriteFile(path, weights);

  CommandResult r = Flashroll("logits --model " + copy.dir() + " --tokens \"1 2\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json rows = Json::parse(r.output).at("logits");
  ASSERT_EQ(rows.size(), 2u);
  size_t nulls = 0;
  for (const Json& row : rows) {
    for (const Json& v : row) nulls += v.is_null();
  }
  EXPECT_GT(nulls, 0u) << "every logit stayed finite with an infinite final norm";
}

TEST(EngineCliTest, GenerateFromTextUsesTheModelTokenizer) {
  CommandResult r = Flashroll("generate --model tests/data/parity/llama --prompt \"hello world\" --max-tokens 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json out = Json::parse(r.output);
  EXPECT_EQ(out["tokens"].size(), 5u);
  EXPECT_TRUE(out["text"].is_string());
  CommandResult sampled = Flashroll(
      "generate --model tests/data/parity/llama --prompt \"hello world\" --max-tokens 8 --temperature 1 --seed 7 --json");
  CommandResult again = Flashroll(
      "generate --model tests/data/parity/llama --prompt \"hello world\" --max-tokens 8 --temperature 1 --seed 7 --json");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(sampled.output, again.output);
}

TEST(EngineCliTest, ModelInfo) {
  CommandResult r = Flashroll("model-info tests/data/parity/qwen3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("family: qwen3\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kv_bytes_per_token: 512\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dtype: f32\n"), std::string::npos) << r.output;
  CommandResult j = Flashroll("model-info --json tests/data/parity/qwen2_moe");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const Json info = Json::parse(j.output);
  EXPECT_EQ(info["family"], "qwen2_moe");
  EXPECT_GT(info["parameters"].get<int64_t>(), 0);
}

// The device memory line: the f32 qwen3 fixture stays f32 on the GPU (4 bytes
// a parameter, nothing tied), its KV is bf16 (half the CPU's f32 512 B/token),
// and a pool for 2 sequences of 100 tokens takes 2 x 7 blocks of 16 tokens.
TEST(EngineCliTest, ModelInfoReportsDeviceMemory) {
  CommandResult j = Flashroll("model-info --json tests/data/parity/qwen3 --context 100 --batch 2");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const Json info = Json::parse(j.output);
  const Json& memory = info["device_memory"];
  EXPECT_EQ(memory["device"], "cuda");
  EXPECT_EQ(memory["weight_bytes"].get<int64_t>(), 4 * info["parameters"].get<int64_t>());
  EXPECT_EQ(memory["kv_bytes_per_token"], 256);
  EXPECT_EQ(memory["kv_pool_bytes"], 2 * 7 * 16 * 256);
  EXPECT_EQ(memory["total_bytes"].get<int64_t>(),
            memory["weight_bytes"].get<int64_t>() + memory["kv_pool_bytes"].get<int64_t>());

  CommandResult r = Flashroll("model-info tests/data/parity/qwen3 --kv-memory 1M");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device memory (cuda): weights 503.8 KiB, KV 256 B/token, KV pool 1 MiB for "
                          "--kv-memory 1M, total 1.5 MiB\n"),
            std::string::npos)
      << r.output;
  CommandResult plain = Flashroll("model-info tests/data/parity/qwen3");
  EXPECT_NE(plain.output.find("device memory (cuda): weights 503.8 KiB, KV 256 B/token\n"), std::string::npos)
      << plain.output;

  CommandResult both = Flashroll("model-info tests/data/parity/qwen3 --kv-memory 1M --context 10");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("give --kv-memory or --context, not both"), std::string::npos) << both.output;
}

TEST(EngineCliTest, CorruptSafetensorsExits2NamingFileAndTensor) {
  FixtureCopy copy("qwen3", "corrupt");
  const std::string& dir = copy.dir();
  const std::string weights = ReadFile(dir + "/model.safetensors");
  WriteFile(dir + "/model.safetensors", weights.substr(0, weights.size() / 2));
  CommandResult r = Flashroll("logits --model " + dir + " --tokens \"1 2\"");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find(dir + "/model.safetensors: tensor '"), std::string::npos) << r.output;

  const std::string header = "{not json at all";
  std::string bad(8, '\0');
  bad[0] = static_cast<char>(header.size());
  WriteFile(dir + "/model.safetensors", bad + header);
  r = Flashroll("model-info " + dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find(dir + "/model.safetensors: header"), std::string::npos) << r.output;
}

TEST(EngineCliTest, ShapeMismatchExits2NamingTheTensor) {
  FixtureCopy copy("qwen3", "shape");
  const std::string& dir = copy.dir();
  std::string config = ReadFile(dir + "/config.json");
  const size_t at = config.find("\"intermediate_size\": 128");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 24, "\"intermediate_size\": 160");
  WriteFile(dir + "/config.json", config);
  CommandResult r = Flashroll("logits --model " + dir + " --tokens \"1 2\"");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find(dir + "/model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight': shape "
                                "[128, 64] does not match the config's [160, 64]"),
            std::string::npos)
      << r.output;
}

TEST(EngineCliTest, UnknownArchitectureExits2NamingTheKey) {
  FixtureCopy copy("qwen3", "arch");
  const std::string& dir = copy.dir();
  std::string config = ReadFile(dir + "/config.json");
  const size_t at = config.find("\"model_type\": \"qwen3\"");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 21, "\"model_type\": \"gpt99\"");
  WriteFile(dir + "/config.json", config);
  CommandResult r = Flashroll("generate --model " + dir + " --tokens \"1 2\" --max-tokens 2 --json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find(dir + "/config.json: model_type: unknown architecture 'gpt99'"), std::string::npos)
      << r.output;
}

TEST(EngineCliTest, BadTokensExit2) {
  CommandResult r = Flashroll("logits --model tests/data/parity/qwen3 --tokens \"1 two\"");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "flashroll: --tokens: 'two' is not a token id\n");
  r = Flashroll("logits --model tests/data/parity/qwen3 --tokens \"1 300\"");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("token 300 at position 1"), std::string::npos) << r.output;
}

TEST(EngineCliTest, BenchDecodePrintsBothRates) {
  CommandResult r = Flashroll(
      "bench decode --model tests/data/parity/qwen3 --threads 1 --context 8 --gen 4 --prefill-tokens 16 --repeats 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json out = Json::parse(r.output);
  EXPECT_GT(out["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(out["prefill_tokens_per_s"].get<double>(), 0);
  r = Flashroll("bench decode --model tests/data/parity/qwen3 --gen 1 --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
}

TEST(EngineCliTest, BenchPreemptPrintsResumeAndReprefillTimes) {
  CommandResult r = Flashroll(
      "bench preempt --model tests/data/parity/qwen3 --threads 1 --context 40 --repeats 1 --kv-dtype f32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json out = Json::parse(r.output);
  EXPECT_GT(out["resume_ms"].get<double>(), 0);
  EXPECT_GT(out["resume_from_disk_ms"].get<double>(), 0);
  EXPECT_GT(out["reprefill_ms"].get<double>(), 0);
  // 2 layers x keys and values x 1 KV head x 32 dims x 4 bytes, plus the header and tokens spread over ~40 tokens.
  EXPECT_GE(out["persist_bytes_per_token"].get<double>(), 512);
  EXPECT_LT(out["persist_bytes_per_token"].get<double>(), 512 + 16);
  EXPECT_EQ(out["kv_dtype"], "f32");
  EXPECT_EQ(out.size(), 5u);
  r = Flashroll("bench preempt --model /nonexistent/flashroll-model --context 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/flashroll-model"), std::string::npos) << r.output;
  EXPECT_EQ(Flashroll("bench preempt --help").exit_code, 0);
}

TEST(EngineCliTest, BenchSwapPrintsThePauseAndTheRates) {
  CommandResult r = Flashroll("bench swap --model models/default --threads 1 --sequences 4 --context 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json out = Json::parse(r.output);
  for (const char* key : {"swap_pause_ms", "gap_ms", "step_ms", "swap_call_ms"}) {
    EXPECT_GE(out[key].get<double>(), 0) << key;
  }
  for (const char* key : {"tokens_per_s_before", "tokens_per_s_during", "tokens_per_s_after"}) {
    EXPECT_GT(out[key].get<double>(), 0) << key;
  }
  EXPECT_EQ(out["sequences"], 4);
  r = Flashroll("bench swap --model /nonexistent/flashroll-model --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/flashroll-model"), std::string::npos) << r.output;
  r = Flashroll("bench swap --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("swap_pause_ms"), std::string::npos) << r.output;
}

TEST(EngineCliTest, ServeWithABadCheckpointRootExits2NamingIt) {
  CommandResult r = Flashroll("serve --model models/default --port 0 --checkpoint-root /nonexistent/flashroll-root");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("--checkpoint-root"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/flashroll-root"), std::string::npos) << r.output;
}

TEST(EngineCliTest, ServeWithANegativeReprefillAgeExits2NamingIt) {
  CommandResult r = Flashroll("serve --model models/default --port 0 --reprefill-older-than -2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("--reprefill-older-than: must be at least 0 (or -1, off), got -2"), std::string::npos)
      << r.output;
  r = Flashroll("serve --help");
  EXPECT_NE(r.output.find("--reprefill-older-than"), std::string::npos) << r.output;
}

TEST(EngineCliTest, ServeWithABadWeightMemoryExitsNamingIt) {
  for (const char* value : {"0", "12X"}) {
    CommandResult r = Flashroll(std::string("serve --model models/default --port 0 --weight-memory ") + value);
    EXPECT_NE(r.exit_code, 0) << value;
    EXPECT_TRUE(OneLine(r.output)) << r.output;
    EXPECT_NE(r.output.find("--weight-memory"), std::string::npos) << r.output;
  }
  CommandResult r = Flashroll("serve --help");
  EXPECT_NE(r.output.find("--weight-memory"), std::string::npos) << r.output;
}

TEST(EngineCliTest, ServeWithAMissingModelExits2NamingThePath) {
  CommandResult r = Flashroll("serve --model /nonexistent/flashroll-model --port 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/flashroll-model"), std::string::npos) << r.output;
}

}  // namespace
