// MoE routing over HTTP: "return_routing" on /v1/completions gives each
// choice the experts of every token the model computed, as JSON arrays or
// ("routing_format": "binary") base64 of the packed ids; /v1/score takes
// either back as "routing" and scores with exactly those experts.
#include <cstring>

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/http.h"
#include "common/json.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/openai_server.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {
namespace {

constexpr char kMoeModelName[] = "default-moe";

class OpenAiRoutingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load("models/default-moe");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = model->release();
    auto tokenizer = LoadModelTokenizer(*model_);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    tokenizer_ = tokenizer->release();
    EngineOptions options;
    options.threads = 2;
    options.kv_memory_bytes = 64ll << 20;
    auto engine = Engine::Start(*model_, tokenizer_, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = engine->release();
    OpenAiServerOptions so;
    so.port = 0;
    so.model_name = kMoeModelName;
    auto server = OpenAiServer::Start(engine_, tokenizer_, so);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete engine_;
    delete tokenizer_;
    delete model_;
  }
  static std::pair<int, Json> Post(const std::string& path, const Json& body) {
    HttpClientOptions options;
    options.base_url = server_->base_url();
    Result<HttpResponse> reply = HttpClient::Create(options).value().Post(path, DumpJson(body), "application/json");
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return {0, nullptr};
    Result<Json> json = ParseJson(reply->body);
    EXPECT_TRUE(json.ok()) << reply->body;
    return {reply->status, json.ok() ? *json : Json(nullptr)};
  }
  static void ExpectError(const std::pair<int, Json>& reply, int status, const std::string& param,
                          const std::string& message = "") {
    EXPECT_EQ(reply.first, status) << reply.second.dump();
    EXPECT_EQ(reply.second["error"]["param"], param) << reply.second.dump();
    if (!message.empty()) {
      EXPECT_NE(reply.second["error"]["message"].get<std::string>().find(message), std::string::npos)
          << reply.second.dump();
    }
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static Engine* engine_;
  static OpenAiServer* server_;
};

Model* OpenAiRoutingTest::model_ = nullptr;
Tokenizer* OpenAiRoutingTest::tokenizer_ = nullptr;
Engine* OpenAiRoutingTest::engine_ = nullptr;
OpenAiServer* OpenAiRoutingTest::server_ = nullptr;

const std::vector<int32_t> kPrompt = {5, 17, 301, 44, 9, 1200, 7, 88, 640, 23, 1999, 31};

TEST_F(OpenAiRoutingTest, CompletionsReturnTheRoutingOfEveryComputedToken) {
  auto [status, reply] = Post("/v1/completions", {{"model", kMoeModelName},
                                                  {"prompt", kPrompt},
                                                  {"max_tokens", 6},
                                                  {"n", 2},
                                                  {"seed", 3},
                                                  {"ignore_eos", true},
                                                  {"return_token_ids", true},
                                                  {"return_routing", true}});
  ASSERT_EQ(status, 200) << reply.dump();
  // The same request in process gives the same experts.
  GenerationRequest r;
  r.prompt = kPrompt;
  r.max_tokens = 6;
  r.n = 2;
  r.sampling.seed = 3;
  r.sampling.temperature = 1;
  r.ignore_eos = true;
  r.return_routing = true;
  r.return_prompt_routing = true;
  auto in_process = engine_->Generate(r);
  ASSERT_TRUE(in_process.ok());
  for (int c = 0; c < 2; ++c) {
    const Json& choice = reply["choices"][c];
    ASSERT_EQ(choice["token_ids"].size(), 6u);
    // [token][layer][k]: the prompt and every generated token but the last.
    const Json& routing = choice["routing"];
    ASSERT_EQ(routing.size(), kPrompt.size() + 6 - 1);
    const Choice& want = (*in_process)[c];
    ASSERT_EQ(choice["token_ids"].get<std::vector<int32_t>>(), want.tokens);
    std::vector<std::vector<int32_t>> all = want.prompt_routing;
    all.insert(all.end(), want.routing.begin(), want.routing.end());
    for (size_t t = 0; t < routing.size(); ++t) {
      ASSERT_EQ(routing[t].size(), 6u);
      std::vector<int32_t> flat;
      for (const Json& layer : routing[t]) {
        ASSERT_EQ(layer.size(), 2u);
        for (const Json& id : layer) flat.push_back(id.get<int32_t>());
      }
      EXPECT_EQ(flat, all[t]) << "token " << t;
    }
  }
}

TEST_F(OpenAiRoutingTest, RoutingIsNotStreamed) {
  ExpectError(Post("/v1/completions", {{"model", kMoeModelName}, {"prompt", kPrompt}, {"stream", true},
                                       {"return_routing", true}}),
              400, "return_routing");
  ExpectError(Post("/v1/completions", {{"model", kMoeModelName}, {"prompt", kPrompt}, {"return_routing", 1}}), 400,
              "return_routing");
}

uint32_t JsonFloatBits(const Json& v) {
  const float f = v.get<float>();
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

TEST_F(OpenAiRoutingTest, ScoringWithTheReturnedRoutingGivesTheGeneratedLogprobsBitwise) {
  auto [status, reply] = Post("/v1/completions", {{"model", kMoeModelName},
                                                  {"prompt", kPrompt},
                                                  {"max_tokens", 24},
                                                  {"seed", 11},
                                                  {"temperature", 0.8},
                                                  {"logprobs", 0},
                                                  {"ignore_eos", true},
                                                  {"return_token_ids", true},
                                                  {"return_routing", true}});
  ASSERT_EQ(status, 200) << reply.dump();
  const Json& choice = reply["choices"][0];
  const Json& generated = choice["logprobs"]["token_logprobs"];
  ASSERT_EQ(generated.size(), 24u);
  Json score = {{"model", kMoeModelName},
                {"prompt_token_ids", kPrompt},
                {"token_ids", choice["token_ids"]},
                {"temperature", 0.8},
                {"routing", choice["routing"]}};
  auto [score_status, scored] = Post("/v1/score", score);
  ASSERT_EQ(score_status, 200) << scored.dump();
  ASSERT_EQ(scored["logprobs"].size(), 24u);
  for (size_t t = 0; t < 24; ++t) EXPECT_EQ(JsonFloatBits(scored["logprobs"][t]), JsonFloatBits(generated[t])) << t;

  // Other experts for token 14 (generated token 2): token 3's logprob on moves.
  Json moved = score;
  Json& ids = moved["routing"][14][0];
  for (int e = 0; e < 8; ++e) {
    if (e != ids[0].get<int>() && e != ids[1].get<int>()) {
      ids[1] = e;
      break;
    }
  }
  auto [moved_status, diverted] = Post("/v1/score", moved);
  ASSERT_EQ(moved_status, 200) << diverted.dump();
  EXPECT_EQ(JsonFloatBits(diverted["logprobs"][2]), JsonFloatBits(generated[2]));
  EXPECT_NE(JsonFloatBits(diverted["logprobs"][3]), JsonFloatBits(generated[3]));

  Json bad = score;
  bad["routing"].erase(bad["routing"].size() - 1);
  bad["routing"].erase(bad["routing"].size() - 1);
  ExpectError(Post("/v1/score", bad), 400, "routing", "33 tokens of routing for 36 tokens");
  bad = score;
  bad["routing"][3][1][1] = 9;
  ExpectError(Post("/v1/score", bad), 400, "routing", "routing[3][1]: expert 9 out of range [0, 8)");
  bad = score;
  bad["routing"][3].erase(5);
  ExpectError(Post("/v1/score", bad), 400, "routing", "routing[3]: 5 layers, the model has 6 MoE layers");
  bad = score;
  bad["routing"][3][2] = {1, 2, 3};
  ExpectError(Post("/v1/score", bad), 400, "routing", "routing[3][2]: 3 expert ids, the model routes each token to 2");
  bad = score;
  bad["routing"][4][0][0] = "x";
  ExpectError(Post("/v1/score", bad), 400, "routing", "routing[4][0][0]");
  bad["routing"][4][0][0] = -1;
  ExpectError(Post("/v1/score", bad), 400, "routing", "routing[4][0][0] = -1 is not an expert id");
  bad["routing"] = 5;
  ExpectError(Post("/v1/score", bad), 400, "routing", "expected an array");
  // An empty routing is one of the wrong length, not none.
  bad["routing"] = Json::array();
  ExpectError(Post("/v1/score", bad), 400, "routing", "0 tokens of routing for 36 tokens");
}

// A binary routing's bytes.
std::vector<uint8_t> RoutingBytes(const Json& choice) {
  Result<std::vector<uint8_t>> bytes = Base64Decode(choice["routing"].get<std::string>());
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

// A JSON routing [token][layer][k] flattened to the binary form's order.
std::vector<uint8_t> FlatIds(const Json& routing) {
  std::vector<uint8_t> flat;
  for (const Json& token : routing) {
    for (const Json& layer : token) {
      for (const Json& id : layer) flat.push_back(static_cast<uint8_t>(id.get<int>()));
    }
  }
  return flat;
}

TEST_F(OpenAiRoutingTest, BinaryRoutingIsTheJsonRoutingPacked) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    Json body = {{"model", kMoeModelName}, {"max_tokens", 6},        {"n", 2},
                 {"seed", 5},           {"ignore_eos", true},     {"return_token_ids", true},
                 {"return_routing", true}};
    if (std::string(path) == "/v1/completions") {
      body["prompt"] = kPrompt;
    } else {
      body["messages"] = Json::array({{{"role", "user"}, {"content", "route me"}}});
    }
    auto [json_status, as_json] = Post(path, body);
    ASSERT_EQ(json_status, 200) << as_json.dump();
    body["routing_format"] = "json";
    auto [explicit_status, explicit_json] = Post(path, body);
    ASSERT_EQ(explicit_status, 200) << explicit_json.dump();
    body["routing_format"] = "binary";
    auto [binary_status, as_binary] = Post(path, body);
    ASSERT_EQ(binary_status, 200) << as_binary.dump();
    for (int c = 0; c < 2; ++c) {
      const Json& want = as_json["choices"][c];
      const Json& got = as_binary["choices"][c];
      ASSERT_EQ(got["token_ids"], want["token_ids"]) << path << " choice " << c;
      EXPECT_EQ(explicit_json["choices"][c]["routing"], want["routing"]) << path;
      EXPECT_FALSE(want.contains("routing_shape"));
      EXPECT_FALSE(want.contains("routing_id_bytes"));
      const int64_t tokens = static_cast<int64_t>(want["routing"].size());
      ASSERT_GT(tokens, 5);
      // default-moe: 6 MoE layers, 2 of 8 experts each, one byte an id.
      EXPECT_EQ(got["routing_shape"], Json::array({tokens, 6, 2})) << path;
      EXPECT_EQ(got["routing_id_bytes"], 1) << path;
      const std::vector<uint8_t> bytes = RoutingBytes(got);
      EXPECT_EQ(static_cast<int64_t>(bytes.size()), tokens * 6 * 2) << path;
      EXPECT_EQ(bytes, FlatIds(want["routing"])) << path << " choice " << c;
    }
  }
}

TEST_F(OpenAiRoutingTest, RoutingFormatNeedsReturnRoutingAndAKnownValue) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  for (const Json& format : {Json("binary"), Json("json")}) {
    ExpectError(Post("/v1/completions", {{"model", kMoeModelName}, {"prompt", kPrompt}, {"routing_format", format}}),
                400, "routing_format", "needs \"return_routing\": true");
    ExpectError(Post("/v1/chat/completions", {{"model", kMoeModelName}, {"messages", messages},
                                              {"return_routing", false}, {"routing_format", format}}),
                400, "routing_format", "needs \"return_routing\": true");
  }
  ExpectError(Post("/v1/completions", {{"model", kMoeModelName}, {"prompt", kPrompt}, {"return_routing", true},
                                       {"routing_format", "base64"}}),
              400, "routing_format", "expected \"json\" or \"binary\", got \"base64\"");
  ExpectError(Post("/v1/chat/completions", {{"model", kMoeModelName}, {"messages", messages}, {"return_routing", true},
                                            {"routing_format", 1}}),
              400, "routing_format");
}

TEST_F(OpenAiRoutingTest, ScoringWithBinaryRoutingGivesTheJsonRoutingsLogprobsBitwise) {
  Json body = {{"model", kMoeModelName},      {"prompt", kPrompt},  {"max_tokens", 24},
               {"seed", 11},               {"temperature", 0.8}, {"logprobs", 0},
               {"ignore_eos", true},       {"return_token_ids", true}, {"return_routing", true},
               {"routing_format", "binary"}};
  auto [status, reply] = Post("/v1/completions", body);
  ASSERT_EQ(status, 200) << reply.dump();
  const Json& choice = reply["choices"][0];
  const Json& generated = choice["logprobs"]["token_logprobs"];
  ASSERT_EQ(generated.size(), 24u);
  body.erase("routing_format");
  auto [json_status, json_reply] = Post("/v1/completions", body);
  ASSERT_EQ(json_status, 200) << json_reply.dump();
  ASSERT_EQ(json_reply["choices"][0]["token_ids"], choice["token_ids"]);

  Json score = {{"model", kMoeModelName},
                {"prompt_token_ids", kPrompt},
                {"token_ids", choice["token_ids"]},
                {"temperature", 0.8},
                {"routing", json_reply["choices"][0]["routing"]}};
  auto [json_score_status, json_scored] = Post("/v1/score", score);
  ASSERT_EQ(json_score_status, 200) << json_scored.dump();
  score["routing"] = choice["routing"];
  auto [binary_score_status, binary_scored] = Post("/v1/score", score);
  ASSERT_EQ(binary_score_status, 200) << binary_scored.dump();
  score["routing_id_bytes"] = 1;
  auto [sized_status, sized_scored] = Post("/v1/score", score);
  ASSERT_EQ(sized_status, 200) << sized_scored.dump();
  ASSERT_EQ(binary_scored["logprobs"].size(), 24u);
  for (size_t t = 0; t < 24; ++t) {
    EXPECT_EQ(JsonFloatBits(binary_scored["logprobs"][t]), JsonFloatBits(generated[t])) << t;
    EXPECT_EQ(JsonFloatBits(binary_scored["logprobs"][t]), JsonFloatBits(json_scored["logprobs"][t])) << t;
    EXPECT_EQ(JsonFloatBits(sized_scored["logprobs"][t]), JsonFloatBits(generated[t])) << t;
  }

  // Other experts for token 14 (generated token 2), written into the bytes:
  // the binary routing is replayed, not ignored.
  std::vector<uint8_t> bytes = RoutingBytes(choice);
  uint8_t* ids = &bytes[14 * 12];
  for (uint8_t e = 0; e < 8; ++e) {
    if (e != ids[0] && e != ids[1]) {
      ids[1] = e;
      break;
    }
  }
  score["routing"] = Base64Encode(bytes);
  auto [moved_status, diverted] = Post("/v1/score", score);
  ASSERT_EQ(moved_status, 200) << diverted.dump();
  EXPECT_EQ(JsonFloatBits(diverted["logprobs"][2]), JsonFloatBits(generated[2]));
  EXPECT_NE(JsonFloatBits(diverted["logprobs"][3]), JsonFloatBits(generated[3]));
}

TEST_F(OpenAiRoutingTest, BadBinaryRoutingIs400NamingTheField) {
  auto [status, reply] = Post("/v1/completions", {{"model", kMoeModelName},
                                                  {"prompt", kPrompt},
                                                  {"max_tokens", 24},
                                                  {"seed", 11},
                                                  {"ignore_eos", true},
                                                  {"return_token_ids", true},
                                                  {"return_routing", true},
                                                  {"routing_format", "binary"}});
  ASSERT_EQ(status, 200) << reply.dump();
  const Json& choice = reply["choices"][0];
  const std::vector<uint8_t> bytes = RoutingBytes(choice);
  ASSERT_EQ(bytes.size(), 35u * 12);
  const Json score = {{"model", kMoeModelName}, {"prompt_token_ids", kPrompt}, {"token_ids", choice["token_ids"]}};
  auto with = [&](Json routing) {
    Json body = score;
    body["routing"] = std::move(routing);
    return body;
  };

  // Not base64.
  std::string text = choice["routing"].get<std::string>();
  text[8] = '*';
  ExpectError(Post("/v1/score", with(text)), 400, "routing", "routing: not base64: invalid character '*' at offset 8");
  text = choice["routing"].get<std::string>() + "=";
  ExpectError(Post("/v1/score", with(text)), 400, "routing", "not base64: length 561 is not a multiple of 4");
  text = choice["routing"].get<std::string>();
  text.replace(4, 4, "AA==");
  ExpectError(Post("/v1/score", with(text)), 400, "routing", "not base64: padding '=' at offset 6 before the end");

  // Not a whole number of tokens of 6 layers x 2 ids x 1 byte.
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 5);
  ExpectError(Post("/v1/score", with(Base64Encode(cut))), 400, "routing",
              "415 bytes of routing are not a whole number of tokens of 12 bytes (6 MoE layers x 2 ids x 1 byte)");
  // Whole tokens, then the JSON form's checks, positions included.
  cut.assign(bytes.begin(), bytes.end() - 2 * 12);
  ExpectError(Post("/v1/score", with(Base64Encode(cut))), 400, "routing", "33 tokens of routing for 36 tokens");
  ExpectError(Post("/v1/score", with("")), 400, "routing", "0 tokens of routing for 36 tokens");
  std::vector<uint8_t> bad = bytes;
  bad[3 * 12 + 1 * 2 + 1] = 9;
  ExpectError(Post("/v1/score", with(Base64Encode(bad))), 400, "routing",
              "routing[3][1]: expert 9 out of range [0, 8)");
  bad = bytes;
  bad[4 * 12 + 5 * 2 + 1] = bad[4 * 12 + 5 * 2];
  ExpectError(Post("/v1/score", with(Base64Encode(bad))), 400, "routing", "routing[4][5]: expert");
  ExpectError(Post("/v1/score", with(Base64Encode(bad))), 400, "routing", "repeated");

  // routing_id_bytes: the model's (1), only with a base64 routing.
  Json sized = with(choice["routing"]);
  sized["routing_id_bytes"] = 2;
  ExpectError(Post("/v1/score", sized), 400, "routing_id_bytes",
              "routing_id_bytes: the model's 8 experts take 1 byte an id, got 2");
  sized["routing_id_bytes"] = 3;
  ExpectError(Post("/v1/score", sized), 400, "routing_id_bytes", "must be at most 2");
  sized["routing_id_bytes"] = "1";
  ExpectError(Post("/v1/score", sized), 400, "routing_id_bytes");
  Json unsized = score;
  unsized["routing_id_bytes"] = 1;
  ExpectError(Post("/v1/score", unsized), 400, "routing_id_bytes", "only with \"routing\" as a base64 string");
  ExpectError(Post("/v1/score", with(5)), 400, "routing", "expected an array or a base64 string, got number");
}

}  // namespace
}  // namespace flashroll::engine
