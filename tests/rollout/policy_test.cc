// The two policies: the embedded engine, and the same engine behind its
// OpenAI-compatible server reached over HTTP. A seeded turn gives the same
// tokens, bitwise the same logprobs and the same versions either way.
#include "rollout/policy.h"

#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/openai_server.h"

namespace flashroll {
namespace {

class PolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = engine::Model::Load("models/default").value().release();
    tokenizer_ = engine::LoadModelTokenizer(*model_).value().release();
    engine::EngineOptions options;
    options.threads = 2;
    options.kv_memory_bytes = 64ll << 20;
    engine_ = engine::Engine::Start(*model_, tokenizer_, options).value().release();
    engine::OpenAiServerOptions server;
    server.port = 0;
    server.model_name = "default";
    server.api_keys = {"policy-test-key"};
    server_ = engine::OpenAiServer::Start(engine_, tokenizer_, server).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete engine_;
    delete tokenizer_;
    delete model_;
  }

  static std::vector<PolicyToken> Turn(Policy& policy, double temperature, Status* status = nullptr) {
    PolicyRequest request;
    // A prompt like the demonstrations' (the bash_block scaffold at effort 1),
    // which the model ends with <|im_end|> after one tool call.
    tokenizer_->EncodeAppend(
        "<|im_start|>system\nYou are an agent that solves tasks by running shell commands in a working "
        "directory.\nTo run a command, write it in a bash code block:\n```bash\nCOMMAND\n```\nRun one command per "
        "message and wait for its output. Think inside <think>...</think> before each message. When you know the "
        "result, reply with <answer>RESULT</answer>.\nReasoning Effort: 1<|im_end|>\n<|im_start|>user\nCompute the "
        "exact value of the Python expression 2 + 3 and give the result as your final answer.<|im_end|>\n"
        "<|im_start|>assistant\n",
        /*parse_special=*/true, &request.prompt);
    request.max_tokens = 300;
    request.stop_tokens = {tokenizer_->TokenId("<|im_end|>")};
    request.temperature = temperature;
    request.seed = 77;
    std::vector<PolicyToken> tokens;
    auto stopped = policy.Generate(request, [&](const PolicyToken& t) { tokens.push_back(t); }, [] { return false; });
    if (status) *status = stopped.status();
    if (stopped.ok()) {
      EXPECT_FALSE(*stopped);
    }
    return tokens;
  }

  static engine::Model* model_;
  static engine::Tokenizer* tokenizer_;
  static engine::Engine* engine_;
  static engine::OpenAiServer* server_;
};

engine::Model* PolicyTest::model_ = nullptr;
engine::Tokenizer* PolicyTest::tokenizer_ = nullptr;
engine::Engine* PolicyTest::engine_ = nullptr;
engine::OpenAiServer* PolicyTest::server_ = nullptr;

TEST_F(PolicyTest, OverHttpTheTurnIsTheEnginesBitForBit) {
  auto remote = OpenAiPolicy({server_->base_url(), "default", "policy-test-key", engine_->max_model_len()});
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  const std::unique_ptr<Policy> local = EnginePolicy(*engine_);
  EXPECT_EQ((*remote)->max_model_len(), local->max_model_len());
  for (double temperature : {0.0, 1.0}) {
    const std::vector<PolicyToken> a = Turn(*local, temperature);
    const std::vector<PolicyToken> b = Turn(**remote, temperature);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size()) << "temperature " << temperature;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].token, b[i].token) << i;
      EXPECT_EQ(a[i].logprob, b[i].logprob) << i << ": float32 through JSON round-trips";
      EXPECT_EQ(a[i].version, b[i].version) << i;
    }
    ASSERT_LT(a.size(), 300u) << "the model answers within 300 tokens";
    EXPECT_EQ(a.back().token, tokenizer_->TokenId("<|im_end|>")) << "the stop token ends the turn, kept";
  }
}

TEST_F(PolicyTest, ServerErrorsNameTheEndpoint) {
  auto unauthorised = OpenAiPolicy({server_->base_url(), "default", "wrong-key", 4096});
  ASSERT_TRUE(unauthorised.ok());
  Status status;
  EXPECT_TRUE(Turn(**unauthorised, 0.0, &status).empty());
  EXPECT_EQ(status.code(), Code::kUnauthenticated) << status.ToString();
  EXPECT_NE(status.message().find("policy " + server_->base_url() + "/v1/completions"), std::string::npos) << status.ToString();

  auto unreachable = OpenAiPolicy({"http://127.0.0.1:1", "default", "", 4096});
  ASSERT_TRUE(unreachable.ok());
  EXPECT_TRUE(Turn(**unreachable, 0.0, &status).empty());
  EXPECT_EQ(status.code(), Code::kUnavailable) << status.ToString();
  EXPECT_NE(status.message().find("policy http://127.0.0.1:1/v1/completions"), std::string::npos) << status.ToString();

  EXPECT_EQ(OpenAiPolicy({"ftp://x", "m", "", 1}).status().code(), Code::kInvalidArgument);
}

TEST_F(PolicyTest, AnInterruptedEngineTurnStopsBetweenTokens) {
  const std::unique_ptr<Policy> local = EnginePolicy(*engine_);
  PolicyRequest request;
  request.prompt = {1, 2, 3};
  request.max_tokens = 500;
  request.temperature = 1.0;
  int seen = 0;
  auto stopped = local->Generate(request, [&](const PolicyToken&) { ++seen; }, [&] { return seen >= 3; });
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_TRUE(*stopped);
  EXPECT_LT(seen, 500);
}

}  // namespace
}  // namespace flashroll
