// The OpenAI-compatible server over the shipped default model, through our
// HttpClient and raw sockets: the reply shapes, the errors (400 naming the
// field, 404 for an unknown model, 401 without the key), streaming, a client
// that goes away mid-stream (its KV blocks are freed), connections beyond the
// limit (429), and /metrics; weight loads over HTTP (403 for each escape,
// 400 naming a mismatching tensor, 409 for a version that does not rise,
// 202 then the new version, min_version, swap identity). Also the pieces
// without a server: tool-call parsing and stop-string handling of streamed
// text.
#include "engine/server/openai_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/http.h"
#include "common/json.h"
#include "engine/models/checkpoint.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/choice_text.h"
#include "engine/server/openai_request.h"
#include "engine/server/openai_response.h"
#include "engine/server/serve.h"
#include "engine/server/tool_calls.h"
#include "engine/serving/engine.h"
#include "tests/engine/raw_connection.h"
#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kModelName[] = "default";

class OpenAiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load("models/default");
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
    server_ = StartServer({}).release();
    ASSERT_NE(server_, nullptr);
  }

  static void TearDownTestSuite() {
    delete server_;
    delete engine_;
    delete tokenizer_;
    delete model_;
    server_ = nullptr;
  }

  static std::unique_ptr<OpenAiServer> StartServer(const std::string& api_key, size_t max_connections = 16) {
    OpenAiServerOptions options;
    options.port = 0;
    options.model_name = kModelName;
    if (!api_key.empty()) options.api_keys = {api_key};
    options.max_connections = max_connections;
    auto server = OpenAiServer::Start(engine_, tokenizer_, options);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  static HttpClient Client(const OpenAiServer& server, const std::string& key = "") {
    HttpClientOptions options;
    options.base_url = server.base_url();
    options.bearer_token = key;
    return HttpClient::Create(options).value();
  }

  // POSTs `body` and returns the status and parsed reply.
  static std::pair<int, Json> Post(const std::string& path, const Json& body) {
    return PostText(path, DumpJson(body));
  }
  static std::pair<int, Json> PostText(const std::string& path, const std::string& body) {
    Result<HttpResponse> reply = Client(*server_).Post(path, body, "application/json");
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return {0, nullptr};
    Result<Json> json = ParseJson(reply->body);
    EXPECT_TRUE(json.ok()) << reply->body;
    return {reply->status, json.ok() ? *json : Json(nullptr)};
  }

  // Asserts an OpenAI-style error naming `param`.
  static void ExpectError(const std::pair<int, Json>& reply, int status, const std::string& param) {
    EXPECT_EQ(reply.first, status) << reply.second.dump();
    const Json& error = reply.second["error"];
    ASSERT_TRUE(error.is_object()) << reply.second.dump();
    EXPECT_TRUE(error["message"].is_string());
    EXPECT_EQ(error["type"], status >= 500 ? "server_error" : "invalid_request_error");
    if (param.empty()) {
      EXPECT_TRUE(error["param"].is_null()) << reply.second.dump();
    } else {
      EXPECT_EQ(error["param"], param) << reply.second.dump();
    }
  }

  // Waits until the engine holds no sequence and no KV block.
  static bool WaitIdle(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      EngineStats s = engine_->Stats();
      if (s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0) return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return false;
  }

  static std::vector<int32_t> Encode(const std::string& text) { return tokenizer_->Encode(text, true); }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static Engine* engine_;
  static OpenAiServer* server_;
};

Model* OpenAiServerTest::model_ = nullptr;
Tokenizer* OpenAiServerTest::tokenizer_ = nullptr;
Engine* OpenAiServerTest::engine_ = nullptr;
OpenAiServer* OpenAiServerTest::server_ = nullptr;

const char kChatPrompt[] = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n";

TEST_F(OpenAiServerTest, ModelsListsTheServedModel) {
  Result<Json> models = Client(*server_).GetJson("/v1/models");
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ((*models)["object"], "list");
  ASSERT_EQ((*models)["data"].size(), 1u);
  EXPECT_EQ((*models)["data"][0]["id"], kModelName);
  EXPECT_EQ((*models)["data"][0]["object"], "model");
  Result<Json> health = Client(*server_).GetJson("/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ((*health)["status"], "ok");
}

TEST_F(OpenAiServerTest, StopTokenIdsEndAChoiceAndTokenVersionsComeWithTheIds) {
  const std::vector<int32_t> prompt = Encode(kChatPrompt);
  auto [status, reply] = Post("/v1/completions", {{"model", kModelName}, {"prompt", prompt}, {"max_tokens", 12},
                                                  {"temperature", 0}, {"ignore_eos", true}, {"return_token_ids", true}});
  ASSERT_EQ(status, 200) << reply.dump();
  const std::vector<int32_t> free_run = reply["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(free_run.size(), 3u);
  EXPECT_EQ(reply["choices"][0]["token_versions"].get<std::vector<int64_t>>(), std::vector<int64_t>(free_run.size(), 0));
  // Stopping at the third token's id ends the choice there, the token kept.
  auto [stop_status, stopped] = Post("/v1/completions", {{"model", kModelName}, {"prompt", prompt}, {"max_tokens", 12},
                                                         {"temperature", 0}, {"ignore_eos", true},
                                                         {"return_token_ids", true}, {"stop_token_ids", {free_run[2]}}});
  ASSERT_EQ(stop_status, 200) << stopped.dump();
  const std::vector<int32_t> ids = stopped["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  const size_t first = static_cast<size_t>(std::find(free_run.begin(), free_run.end(), free_run[2]) - free_run.begin());
  EXPECT_EQ(ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + static_cast<long>(first) + 1));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  auto [bad_status, bad] = Post("/v1/completions", {{"model", kModelName}, {"prompt", prompt},
                                                    {"stop_token_ids", {1, 999999}}});
  EXPECT_EQ(bad_status, 400);
  EXPECT_EQ(bad["error"]["param"], "stop_token_ids") << bad.dump();
  EXPECT_NE(bad["error"]["message"].get<std::string>().find("stop_token_ids[1] = 999999 is outside the vocabulary"),
            std::string::npos)
      << bad.dump();
}

TEST_F(OpenAiServerTest, CompletionFromTokenIdsReturnsTokenIdsAndMatchesTheEngine) {
  const std::vector<int32_t> prompt = Encode(kChatPrompt);
  auto [status, reply] = Post("/v1/completions", {{"model", kModelName},
                                                  {"prompt", prompt},
                                                  {"max_tokens", 12},
                                                  {"temperature", 0},
                                                  {"return_token_ids", true}});
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(reply["object"], "text_completion");
  EXPECT_EQ(reply["model"], kModelName);
  EXPECT_EQ(reply["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
  ASSERT_EQ(reply["choices"].size(), 1u);
  const Json& choice = reply["choices"][0];
  const std::vector<int32_t> ids = choice["token_ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_LE(ids.size(), 12u);
  EXPECT_EQ(choice["text"], tokenizer_->Decode(ids, /*skip_special=*/true));
  EXPECT_TRUE(choice["finish_reason"] == "stop" || choice["finish_reason"] == "length");
  EXPECT_EQ(reply["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(reply["usage"]["completion_tokens"], ids.size());
  EXPECT_EQ(reply["usage"]["total_tokens"], prompt.size() + ids.size());

  // The same greedy continuation as the engine's own API.
  GenerationRequest request;
  request.prompt = prompt;
  request.sampling.temperature = 0;
  request.max_tokens = 12;
  auto direct = engine_->Generate(request);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ((*direct)[0].tokens, ids);

  // A text prompt is tokenised as the model's tokenizer does, special tokens included.
  auto [text_status, text_reply] = Post("/v1/completions", {{"model", kModelName},
                                                            {"prompt", kChatPrompt},
                                                            {"max_tokens", 12},
                                                            {"temperature", 0},
                                                            {"return_token_ids", true}});
  ASSERT_EQ(text_status, 200) << text_reply.dump();
  EXPECT_EQ(text_reply["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
  EXPECT_EQ(text_reply["choices"][0]["token_ids"].get<std::vector<int32_t>>(), ids);
}

TEST_F(OpenAiServerTest, ChatCompletionRendersTheTemplate) {
  auto [status, reply] = Post("/v1/chat/completions",
                              {{"model", kModelName},
                               {"messages", Json::array({{{"role", "user"}, {"content", "What is 2 + 3?"}}})},
                               {"max_tokens", 12},
                               {"temperature", 0},
                               {"return_token_ids", true}});
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(reply["object"], "chat.completion");
  // ChatML exactly as the template writes it (this template has no default system turn).
  EXPECT_EQ(reply["prompt_token_ids"].get<std::vector<int32_t>>(), Encode(kChatPrompt));
  const Json& message = reply["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_TRUE(message["content"].is_string());
  EXPECT_FALSE(message.contains("tool_calls"));
}

TEST_F(OpenAiServerTest, SeededSamplingIsReproducibleAndChoicesDiffer) {
  const Json body = {{"model", kModelName},
                     {"prompt", kChatPrompt},
                     {"max_tokens", 24},
                     {"temperature", 1.5},
                     {"n", 2},
                     {"seed", 1234},
                     {"ignore_eos", true},
                     {"return_token_ids", true},
                     {"logprobs", 2}};
  auto [s1, first] = Post("/v1/completions", body);
  auto [s2, second] = Post("/v1/completions", body);
  ASSERT_EQ(s1, 200) << first.dump();
  ASSERT_EQ(s2, 200) << second.dump();
  ASSERT_EQ(first["choices"].size(), 2u);
  // Each choice is a sequence of its own; otherwise the runs are the same.
  for (Json* reply : {&first, &second}) {
    for (Json& choice : (*reply)["choices"]) {
      ASSERT_TRUE(choice["sequence_id"].is_string()) << choice.dump();
      choice.erase("sequence_id");
    }
  }
  EXPECT_EQ(first["choices"], second["choices"]);  // tokens, text and logprobs, bit for bit
  EXPECT_NE(first["choices"][0]["token_ids"], first["choices"][1]["token_ids"]);
  EXPECT_EQ(first["usage"]["completion_tokens"], 48);
}

TEST_F(OpenAiServerTest, LogprobsHaveOpenAisShapes) {
  auto [status, chat] = Post("/v1/chat/completions",
                             {{"model", kModelName},
                              {"messages", Json::array({{{"role", "user"}, {"content", "Hello"}}})},
                              {"max_tokens", 6},
                              {"logprobs", true},
                              {"top_logprobs", 3},
                              {"return_token_ids", true},
                              {"seed", 5}});
  ASSERT_EQ(status, 200) << chat.dump();
  const Json& content = chat["choices"][0]["logprobs"]["content"];
  const std::vector<int32_t> ids = chat["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(content.size(), ids.size());
  for (const Json& entry : content) {
    EXPECT_TRUE(entry["token"].is_string());
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(entry["bytes"].is_array());
    ASSERT_EQ(entry["top_logprobs"].size(), 3u);
    EXPECT_GE(entry["top_logprobs"][0]["logprob"].get<double>(), entry["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_GE(entry["top_logprobs"][0]["logprob"].get<double>(), entry["logprob"].get<double>());
  }

  auto [cstatus, completion] = Post("/v1/completions", {{"model", kModelName},
                                                         {"prompt", kChatPrompt},
                                                         {"max_tokens", 5},
                                                         {"ignore_eos", true},
                                                         {"logprobs", 2},
                                                         {"temperature", 0}});
  ASSERT_EQ(cstatus, 200) << completion.dump();
  const Json& lp = completion["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  ASSERT_EQ(lp["text_offset"].size(), 5u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  // Greedy: the chosen token is the most likely one.
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_TRUE(lp["top_logprobs"][i].contains(lp["tokens"][i].get<std::string>())) << lp.dump();
  }
}

TEST_F(OpenAiServerTest, StopStringsEndTheTextBeforeThem) {
  auto [status, free_run] = Post("/v1/completions", {{"model", kModelName},
                                                     {"prompt", kChatPrompt},
                                                     {"max_tokens", 30},
                                                     {"temperature", 0}});
  ASSERT_EQ(status, 200);
  const std::string text = free_run["choices"][0]["text"];
  ASSERT_GE(text.size(), 8u) << text;
  const std::string stop = text.substr(4, 3);
  auto [stopped_status, stopped] = Post("/v1/completions", {{"model", kModelName},
                                                            {"prompt", kChatPrompt},
                                                            {"max_tokens", 30},
                                                            {"temperature", 0},
                                                            {"stop", stop}});
  ASSERT_EQ(stopped_status, 200) << stopped.dump();
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
}

// Splits an SSE body into its data payloads.
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

TEST_F(OpenAiServerTest, StreamingSendsTheSameTextAsOneReply) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "What is 2 + 3?"}}});
  const Json body = {{"model", kModelName}, {"messages", messages}, {"max_tokens", 20}, {"seed", 9}};
  auto [status, whole] = Post("/v1/chat/completions", body);
  ASSERT_EQ(status, 200);

  Json stream_body = body;
  stream_body["stream"] = true;
  stream_body["stream_options"] = {{"include_usage", true}};
  Result<HttpResponse> reply = Client(*server_).Post("/v1/chat/completions", DumpJson(stream_body), "application/json");
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(reply->content_type.substr(0, 17), "text/event-stream");
  const std::vector<std::string> events = SseData(reply->body);
  ASSERT_GE(events.size(), 3u) << reply->body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, finish;
  Json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json chunk = ParseJson(events[i]).value();
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (chunk.contains("usage")) usage = chunk["usage"];
    for (const Json& c : chunk["choices"]) {
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(usage, whole["usage"]);
}

// Sends a 3,000-token request (about 20 s of decoding here), reads until
// `marker`, hangs up, and expects the engine idle within 3 s having
// generated far fewer tokens than asked.
void ExpectHangUpFreesTheSequence(int port, Engine* engine, bool stream, std::string_view marker) {
  const Json body = {{"model", kModelName}, {"prompt", kChatPrompt}, {"max_tokens", 3000},
                     {"ignore_eos", true},  {"stream", stream},      {"temperature", 1.0}};
  const int64_t generated_before = engine->Stats().generated_tokens;
  RawConnection connection(port);
  ASSERT_TRUE(connection.connected());
  ASSERT_TRUE(connection.Send(PostRequest("/v1/completions", DumpJson(body))));
  const std::string head = connection.ReadUntil(marker);
  ASSERT_NE(head.find("200 OK"), std::string::npos) << head;
  // The request runs (its prefill may come a step after the reply's headers).
  const auto started = Clock::now() + std::chrono::seconds(2);
  while (engine->Stats().kv_blocks_used == 0 && Clock::now() < started) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_GT(engine->Stats().kv_blocks_used, 0);
  connection.Close();
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  bool idle = false;
  while (!idle && Clock::now() < deadline) {
    EngineStats s = engine->Stats();
    idle = s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0;
    if (!idle) std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_TRUE(idle) << "running " << engine->Stats().running << ", blocks used " << engine->Stats().kv_blocks_used;
  EXPECT_LT(engine->Stats().generated_tokens - generated_before, 1500);
}

TEST_F(OpenAiServerTest, ClientLeavingMidStreamFreesItsKvBlocks) {
  ASSERT_TRUE(WaitIdle(std::chrono::seconds(10)));
  // A few tokens arrive first, so the request holds a sequence and its blocks.
  ExpectHangUpFreesTheSequence(server_->port(), engine_, /*stream=*/true, "data: {");
}

TEST_F(OpenAiServerTest, ClientLeavingBeforeAWholeReplyFreesItsKvBlocks) {
  ASSERT_TRUE(WaitIdle(std::chrono::seconds(10)));
  // The reply's headers and the first whitespace keep-alive (after 0.5 s).
  ExpectHangUpFreesTheSequence(server_->port(), engine_, /*stream=*/false, "\r\n\r\n");
}

TEST_F(OpenAiServerTest, RoutingOnADenseModelIs400) {
  auto [status, reply] = Post("/v1/completions", {{"model", kModelName}, {"prompt", "hi"}, {"return_routing", true}});
  ExpectError({status, reply}, 400, "return_routing");
  EXPECT_NE(reply["error"]["message"].get<std::string>().find("no MoE layers"), std::string::npos) << reply.dump();
  auto [score_status, score] = Post("/v1/score", {{"model", kModelName},
                                                  {"prompt_token_ids", {1, 2}},
                                                  {"token_ids", {3}},
                                                  {"routing", {{{0, 1}}, {{0, 1}}, {{0, 1}}}}});
  ExpectError({score_status, score}, 400, "routing");
  EXPECT_NE(score["error"]["message"].get<std::string>().find("has no MoE layers"), std::string::npos) << score.dump();
  // The binary forms: the model has no routing to pack or unpack.
  ExpectError(Post("/v1/completions", {{"model", kModelName}, {"prompt", "hi"}, {"routing_format", "binary"}}), 400,
              "routing_format");
  auto [binary_status, binary] = Post("/v1/completions", {{"model", kModelName}, {"prompt", "hi"},
                                                          {"return_routing", true}, {"routing_format", "binary"}});
  ExpectError({binary_status, binary}, 400, "return_routing");
  EXPECT_NE(binary["error"]["message"].get<std::string>().find("no MoE layers"), std::string::npos) << binary.dump();
  for (const char* packed : {"AAEAAQAB", ""}) {
    auto [packed_status, packed_score] =
        Post("/v1/score", {{"model", kModelName}, {"prompt_token_ids", {1, 2}}, {"token_ids", {3}}, {"routing", packed}});
    ExpectError({packed_status, packed_score}, 400, "routing");
    EXPECT_NE(packed_score["error"]["message"].get<std::string>().find("has no MoE layers"), std::string::npos)
        << packed_score.dump();
  }
}

TEST_F(OpenAiServerTest, BadFieldsAre400NamingTheField) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  ExpectError(Post("/v1/completions", {{"model", kModelName}, {"prompt", "hi"}, {"max_tokens", -5}}), 400,
              "max_tokens");
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}, {"messages", messages}, {"temperature", 7}}),
              400, "temperature");
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}, {"messages", messages}, {"top_p", 0}}), 400,
              "top_p");
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}, {"messages", messages}, {"n", 0}}), 400, "n");
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}, {"messages", messages}, {"top_logprobs", 3}}),
              400, "top_logprobs");
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}, {"messages", messages}, {"stop", 5}}), 400,
              "stop");
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}}), 400, "messages");
  ExpectError(Post("/v1/chat/completions",
                   {{"model", kModelName}, {"messages", Json::array({{{"role", "robot"}, {"content", "x"}}})}}),
              400, "messages[0].role");
  ExpectError(Post("/v1/completions", {{"model", kModelName}}), 400, "prompt");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}}), 400, "model");
  ExpectError(Post("/v1/completions", {{"model", kModelName}, {"prompt", {1, 2, 999999}}}), 400, "prompt");
  ExpectError(Post("/v1/completions", {{"model", kModelName}, {"prompt", "hi"}, {"max_tokens", "ten"}}), 400,
              "max_tokens");
  const Json bad_sampling[] = {{{"top_k", -5}},           {{"min_p", 1.5}},     {{"repetition_penalty", 0}},
                               {{"presence_penalty", 3}}, {{"frequency_penalty", -2.5}}, {{"seed", "x"}},
                               {{"logit_bias", {{"12", 5}}}}, {{"stream", "yes"}}, {{"n", 1000}}};
  for (const Json& field : bad_sampling) {
    Json body = {{"model", kModelName}, {"prompt", "hi"}};
    body.update(field);
    ExpectError(Post("/v1/completions", body), 400, field.begin().key());
  }
}

TEST_F(OpenAiServerTest, EverySamplingFieldIsAccepted) {
  auto [status, reply] = Post("/v1/chat/completions",
                              {{"model", kModelName},
                               {"messages", Json::array({{{"role", "developer"}, {"content", "Be brief."}},
                                                         {{"role", "user"},
                                                          {"content", Json::array({{{"type", "text"}, {"text", "Hi"}}})}}})},
                               {"max_completion_tokens", 6},
                               {"temperature", 0.8},
                               {"top_p", 0.9},
                               {"top_k", 40},
                               {"min_p", 0.05},
                               {"presence_penalty", 0.5},
                               {"frequency_penalty", 0.5},
                               {"repetition_penalty", 1.1},
                               {"seed", -3},
                               {"stop", Json::array({"\n\n", "</answer>"})},
                               {"user", "someone"},
                               {"response_format", {{"type", "text"}}}});
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_LE(reply["usage"]["completion_tokens"].get<int>(), 6);
}

TEST_F(OpenAiServerTest, MalformedJsonIs400) {
  auto reply = PostText("/v1/chat/completions", "{\"model\": \"default\", \"messages\": [");
  ExpectError(reply, 400, "");
  EXPECT_NE(reply.second["error"]["message"].get<std::string>().find("malformed JSON"), std::string::npos);
  ExpectError(PostText("/v1/completions", "[1, 2]"), 400, "");
  ExpectError(PostText("/v1/completions", ""), 400, "");
}

TEST_F(OpenAiServerTest, UnknownModelIs404AndUnknownRouteIs404) {
  auto reply = Post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "hi"}});
  ExpectError(reply, 404, "model");
  EXPECT_EQ(reply.second["error"]["code"], "model_not_found");
  Result<HttpResponse> route = Client(*server_).Get("/v1/nothing");
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(route->status, 404);
  EXPECT_TRUE(ParseJson(route->body).ok()) << route->body;
}

TEST_F(OpenAiServerTest, ContextOverflowIs400WithTheLimit) {
  const int64_t limit = engine_->max_model_len();
  const std::string limit_text = std::to_string(limit);
  std::vector<int32_t> long_prompt(static_cast<size_t>(limit) + 10, Encode("a")[0]);
  auto reply = Post("/v1/completions", {{"model", kModelName}, {"prompt", long_prompt}, {"max_tokens", 1}});
  ExpectError(reply, 400, "prompt");
  EXPECT_EQ(reply.second["error"]["code"], "context_length_exceeded");
  EXPECT_NE(reply.second["error"]["message"].get<std::string>().find(limit_text), std::string::npos);

  reply = Post("/v1/completions", {{"model", kModelName}, {"prompt", "hello"}, {"max_tokens", limit}});
  ExpectError(reply, 400, "max_tokens");
  EXPECT_NE(reply.second["error"]["message"].get<std::string>().find(limit_text), std::string::npos);
}

TEST_F(OpenAiServerTest, ApiKeyIsRequiredOnV1Only) {
  std::unique_ptr<OpenAiServer> secured = StartServer("k3y");
  ASSERT_NE(secured, nullptr);
  const Json body = {{"model", kModelName}, {"prompt", "hi"}, {"max_tokens", 1}};
  for (const std::string key : {"", "wrong"}) {
    Result<HttpResponse> reply = Client(*secured, key).Post("/v1/completions", DumpJson(body), "application/json");
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->status, 401) << reply->body;
    EXPECT_EQ(ParseJson(reply->body).value()["error"]["code"], "invalid_api_key");
    EXPECT_EQ(Client(*secured, key).Get("/v1/models")->status, 401);
  }
  Result<HttpResponse> ok = Client(*secured, "k3y").Post("/v1/completions", DumpJson(body), "application/json");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(Client(*secured).Get("/health")->status, 200);
  EXPECT_EQ(Client(*secured).Get("/metrics")->status, 200);
}

TEST_F(OpenAiServerTest, ConnectionsBeyondTheLimitGet429) {
  std::unique_ptr<OpenAiServer> small = StartServer("", /*max_connections=*/1);
  ASSERT_NE(small, nullptr);
  // A connection that sends half a request holds the only worker.
  RawConnection holder(small->port());
  ASSERT_TRUE(holder.connected());
  ASSERT_TRUE(holder.Send("GET /health HTTP/1.1\r\n"));
  std::this_thread::sleep_for(milliseconds(100));
  Result<HttpResponse> refused = Client(*small).Get("/health");
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->status, 429) << refused->body;
  holder.Send("Host: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(holder.ReadUntil("\r\n\r\n").find("200"), std::string::npos);
}

TEST_F(OpenAiServerTest, MetricsReportTheEngineAndLatencies) {
  auto [status, reply] = Post("/v1/completions", {{"model", kModelName}, {"prompt", "hello"}, {"max_tokens", 4}});
  ASSERT_EQ(status, 200) << reply.dump();
  Result<HttpResponse> metrics = Client(*server_).Get("/metrics");
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->content_type.substr(0, 10), "text/plain");
  for (const char* name :
       {"flashroll_requests_waiting ", "flashroll_sequences_running ", "flashroll_kv_blocks_used ",
        "flashroll_kv_blocks_free ", "flashroll_prefix_cache_hit_rate ", "flashroll_prompt_tokens_total ",
        "flashroll_generation_tokens_total ", "flashroll_prompt_tokens_per_second ",
        "flashroll_generation_tokens_per_second ", "flashroll_time_to_first_token_seconds_bucket{le=\"+Inf\"} ",
        "flashroll_inter_token_latency_seconds_count ",
        "flashroll_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} "}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name << "\n" << metrics->body;
  }
  EXPECT_EQ(metrics->body.find("flashroll_time_to_first_token_seconds_count 0\n"), std::string::npos);
}

TEST_F(OpenAiServerTest, ToolHistoryIsAcceptedByATemplateWithoutTools) {
  const Json tools = Json::array({{{"type", "function"},
                                   {"function",
                                    {{"name", "bash"},
                                     {"description", "run a command"},
                                     {"parameters", {{"type", "object"}}}}}}});
  const Json messages = Json::array(
      {{{"role", "user"}, {"content", "list files"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls", Json::array({{{"id", "call_1"},
                                     {"type", "function"},
                                     {"function", {{"name", "bash"}, {"arguments", "{\"command\": \"ls\"}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "a.txt"}}});
  auto [status, reply] = Post("/v1/chat/completions", {{"model", kModelName},
                                                       {"messages", messages},
                                                       {"tools", tools},
                                                       {"max_tokens", 8},
                                                       {"return_token_ids", true}});
  ASSERT_EQ(status, 200) << reply.dump();
  const std::string prompt = tokenizer_->Decode(reply["prompt_token_ids"].get<std::vector<int32_t>>());
  EXPECT_NE(prompt.find("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"),
            std::string::npos)
      << prompt;
  ExpectError(Post("/v1/chat/completions", {{"model", kModelName}, {"messages", messages}, {"tool_choice", "required"}}),
              400, "tool_choice");
}

TEST(ToolCallParsing, ChatMlBlocksBecomeCallsAndTheRestIsContent) {
  ParsedToolCalls parsed = ParseToolCalls(
      ChatFormatKind::kChatMl,
      "<think>look first</think>\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -l\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(parsed.content, "<think>look first</think>");
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "bash");
  EXPECT_EQ(ParseJson(parsed.calls[0].arguments).value(), Json({{"command", "ls -l"}}));
  EXPECT_EQ(parsed.calls[1].name, "read");

  // Not JSON: left in the content.
  parsed = ParseToolCalls(ChatFormatKind::kChatMl, "<tool_call>\nnot json\n</tool_call>");
  EXPECT_TRUE(parsed.calls.empty());
  EXPECT_EQ(parsed.content, "<tool_call>\nnot json\n</tool_call>");
  // Cut short by max_tokens after whole JSON: still a call.
  parsed = ParseToolCalls(ChatFormatKind::kChatMl, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n");
  ASSERT_EQ(parsed.calls.size(), 1u);

  parsed = ParseToolCalls(ChatFormatKind::kLlama3, "{\"name\": \"get\", \"parameters\": {\"city\": \"Paris\"}}");
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get");
  EXPECT_EQ(ParseJson(parsed.calls[0].arguments).value(), Json({{"city", "Paris"}}));
}

TEST(ToolCallParsing, StreamingHoldsBackAPossibleCallStart) {
  EXPECT_EQ(ToolCallFreeLength(ChatFormatKind::kChatMl, "hello"), 5u);
  EXPECT_EQ(ToolCallFreeLength(ChatFormatKind::kChatMl, "hello <tool"), 6u);
  EXPECT_EQ(ToolCallFreeLength(ChatFormatKind::kChatMl, "hi <tool_call>{"), 3u);
  EXPECT_EQ(ToolCallFreeLength(ChatFormatKind::kChatMl, "a < b"), 5u);
  EXPECT_EQ(ToolCallFreeLength(ChatFormatKind::kLlama3, "{\"name\""), 0u);
  EXPECT_EQ(ToolCallFreeLength(ChatFormatKind::kLlama3, "Paris"), 5u);
  const std::vector<ChatToolCall> calls = {{"bash", "{\"command\": \"ls\"}"}};
  EXPECT_EQ(ToolCallsAsText(ChatFormatKind::kChatMl, calls),
            "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>");
}

TEST_F(OpenAiServerTest, ChoiceTextHoldsBackAPossibleStopString) {
  ChoiceText text(*tokenizer_, {"STOP"});
  for (int32_t id : Encode("abc ST")) text.Push(id);
  EXPECT_EQ(text.text(), "abc ST");
  EXPECT_EQ(text.stable_length(), 4u);  // "ST" may begin "STOP"
  for (int32_t id : Encode("OP tail")) text.Push(id);
  EXPECT_EQ(text.stable_length(), 4u);
  text.Finish();
  EXPECT_EQ(text.text(), "abc ");
  EXPECT_TRUE(text.stopped_by_string());
}

TEST(ServeOptions, DefaultModelNameIsThePathsBasename) {
  EXPECT_EQ(DefaultServedModelName("models/default"), "default");
  EXPECT_EQ(DefaultServedModelName("models/default/"), "default");
  EXPECT_EQ(DefaultServedModelName("/x/qwen2.5-0.5b.gguf"), "qwen2.5-0.5b");
  EXPECT_EQ(DefaultServedModelName("m"), "m");
}

TEST(OpenAiRequest, ErrorsCarryOpenAisShape) {
  Json body;
  std::optional<ApiError> e = ParseJsonBody("{\"a\": ", &body);
  ASSERT_TRUE(e.has_value());
  const Json j = e->ToJson();
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  ChatRequest chat;
  e = ReadChatRequest(Json{{"model", "m"},
                           {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})},
                           {"max_completion_tokens", 0}},
                      &chat);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "max_completion_tokens");
  EXPECT_EQ(ApiErrorFromStatus(Status::InvalidArgument("max_tokens: must not be negative")).param, "max_tokens");
  EXPECT_EQ(ApiErrorFromStatus(Status::Internal("boom")).http_status, 500);
}

// The bits of a JSON number read as a float32, as a client reads a logprob.
uint32_t FloatBits(const Json& v) {
  const float f = static_cast<float>(v.get<double>());
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// Significant digits of a JSON number's text.
size_t SignificantDigits(std::string_view text) {
  text = text.substr(0, text.find_first_of("eE"));
  std::string digits;
  for (char c : text) {
    if (c >= '0' && c <= '9') digits += c;
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 1;
  const size_t last = digits.find_last_not_of('0');
  return last - first + 1;
}

TEST(OpenAiResponse, FloatsRoundTripAndAppendFloatJsonUsesAtMostNineDigits) {
  std::mt19937 rng(7);
  std::vector<float> values = {-0.0f, 0.1f, -1e-30f, -87.3365f, 3.4028235e38f, 1.17549435e-38f, 1e-45f};
  for (int i = 0; i < 20000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    if (std::isfinite(f)) values.push_back(f);
  }
  size_t long_ones = 0;
  for (float f : values) {
    const std::string text = DumpJson(FloatJson(f));
    ASSERT_EQ(FloatBits(ParseJson(text).value()), FloatBits(f)) << text;
    // Grisu2 is not always shortest; whole numbers print all their digits.
    if (std::fabs(f) < 1e6f) long_ones += SignificantDigits(text) > 9;
    std::string hand;
    AppendFloatJson(f, &hand);
    ASSERT_EQ(FloatBits(ParseJson(hand).value()), FloatBits(f)) << hand;
    EXPECT_LE(SignificantDigits(hand), 9u) << hand;
  }
  EXPECT_LT(long_ones, values.size() / 100);
  EXPECT_TRUE(FloatJson(-INFINITY).is_null());
  std::string inf;
  AppendFloatJson(-INFINITY, &inf);
  EXPECT_EQ(inf, "null");
  EXPECT_EQ(DumpJson(FloatJson(-1.5f)), "-1.5");
  EXPECT_EQ(DumpJson(FloatJson(0.1f)), "0.1");
}

constexpr int kScoreSeed = 4242;

TEST_F(OpenAiServerTest, ScoreEqualsGenerationBitwise) {
  const std::vector<int32_t> prompt = Encode(kChatPrompt);
  auto [status, generated] = Post("/v1/completions", {{"model", kModelName},
                                                      {"prompt", prompt},
                                                      {"max_tokens", 32},
                                                      {"temperature", 0.8},
                                                      {"seed", kScoreSeed},
                                                      {"ignore_eos", true},
                                                      {"logprobs", 3},
                                                      {"return_token_ids", true}});
  ASSERT_EQ(status, 200) << generated.dump();
  const Json& choice = generated["choices"][0];
  const std::vector<int32_t> ids = choice["token_ids"].get<std::vector<int32_t>>();
  const Json& generated_lp = choice["logprobs"]["token_logprobs"];
  ASSERT_EQ(ids.size(), 32u);
  ASSERT_EQ(generated_lp.size(), ids.size());

  auto [score_status, score] = Post("/v1/score", {{"model", kModelName},
                                                  {"prompt_token_ids", prompt},
                                                  {"token_ids", ids},
                                                  {"temperature", 0.8},
                                                  {"top_logprobs", 3}});
  ASSERT_EQ(score_status, 200) << score.dump();
  EXPECT_EQ(score["model"], kModelName);
  ASSERT_EQ(score["logprobs"].size(), ids.size());
  ASSERT_EQ(score["top_logprobs"].size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(FloatBits(score["logprobs"][i]), FloatBits(generated_lp[i]))
        << "token " << i << ": scored " << score["logprobs"][i] << ", generated " << generated_lp[i];
    const Json& top = score["top_logprobs"][i];
    ASSERT_EQ(top.size(), 3u);
    EXPECT_GE(top[0]["logprob"].get<double>(), top[1]["logprob"].get<double>());
    EXPECT_GE(top[0]["logprob"].get<double>(), score["logprobs"][i].get<double>());
    // The same alternatives generation reported (by text; ids may share one).
    for (const Json& alt : top) {
      const std::string text = LogprobTokenString(*tokenizer_, alt["token_id"].get<int32_t>());
      ASSERT_TRUE(choice["logprobs"]["top_logprobs"][i].contains(text)) << text;
    }
  }
  EXPECT_EQ(score["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(score["usage"]["scored_tokens"], ids.size());
  EXPECT_EQ(score["usage"]["total_tokens"], prompt.size() + ids.size());

  // Split elsewhere (the prompt's blocks now come from the prefix cache):
  // the same bits for the tokens scored.
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), ids.begin(), ids.begin() + 10);
  auto [tail_status, tail] = Post("/v1/score", {{"model", kModelName},
                                                {"prompt_token_ids", longer},
                                                {"token_ids", std::vector<int32_t>(ids.begin() + 10, ids.end())},
                                                {"temperature", 0.8}});
  ASSERT_EQ(tail_status, 200) << tail.dump();
  EXPECT_FALSE(tail.contains("top_logprobs"));
  ASSERT_EQ(tail["logprobs"].size(), ids.size() - 10);
  for (size_t i = 10; i < ids.size(); ++i) {
    EXPECT_EQ(FloatBits(tail["logprobs"][i - 10]), FloatBits(generated_lp[i])) << "token " << i;
  }
}

TEST_F(OpenAiServerTest, ScoreFullVocabIsLittleEndianFloat32Rows) {
  const std::vector<int32_t> prompt = Encode(kChatPrompt);
  const std::vector<int32_t> ids = Encode("The answer is 5.");
  ASSERT_GE(ids.size(), 3u);
  const int64_t vocab = model_->config().vocab_size;
  auto [status, json] = Post("/v1/score", {{"model", kModelName}, {"prompt_token_ids", prompt}, {"token_ids", ids},
                                           {"temperature", 0.7}});
  ASSERT_EQ(status, 200) << json.dump();
  // The JSON body prints each logprob in its shortest float32 digits.
  const Json json_body = {{"model", kModelName}, {"prompt_token_ids", prompt}, {"token_ids", ids}, {"temperature", 0.7}};
  Result<HttpResponse> raw = Client(*server_).Post("/v1/score", DumpJson(json_body), "application/json");
  ASSERT_TRUE(raw.ok());
  const size_t open = raw->body.find("\"logprobs\":[");
  ASSERT_NE(open, std::string::npos) << raw->body;
  const std::string list = raw->body.substr(open + 12, raw->body.find(']', open) - open - 12);
  size_t items = 0;
  for (size_t pos = 0; pos <= list.size(); ++items) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    EXPECT_LE(SignificantDigits(list.substr(pos, comma - pos)), 9u) << list;
    pos = comma + 1;
  }
  EXPECT_EQ(items, ids.size()) << list;

  const Json body = {{"model", kModelName}, {"prompt_token_ids", prompt}, {"token_ids", ids},
                     {"temperature", 0.7},  {"full_vocab", true},         {"format", "f32"}};
  Result<HttpResponse> reply = Client(*server_).Post("/v1/score", DumpJson(body), "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(reply->content_type, "application/octet-stream");
  EXPECT_EQ(reply->Header("x-flashroll-vocab-size"), std::to_string(vocab));
  EXPECT_EQ(reply->Header("x-flashroll-rows"), std::to_string(ids.size()));
  ASSERT_EQ(reply->body.size(), ids.size() * static_cast<size_t>(vocab) * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> row(static_cast<size_t>(vocab));
    std::memcpy(row.data(), reply->body.data() + i * row.size() * 4, row.size() * 4);  // little-endian host
    double sum = 0;
    for (float lp : row) {
      EXPECT_LE(lp, 0.0f);
      sum += std::exp(static_cast<double>(lp));
    }
    EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << i;
    EXPECT_EQ(FloatBits(row[static_cast<size_t>(ids[i])]), FloatBits(json["logprobs"][i])) << "row " << i;
  }
}

// The SSE events' JSON objects in a raw chunked HTTP reply.
std::vector<Json> StreamChunks(const std::string& raw) {
  std::vector<Json> out;
  for (const std::string& data : SseData(raw)) {
    if (data == "[DONE]") break;
    Result<Json> j = ParseJson(data);
    if (j.ok()) out.push_back(*j);
  }
  return out;
}

TEST_F(OpenAiServerTest, PausedStreamResumesAsIfNeverPaused) {
  ASSERT_TRUE(WaitIdle(std::chrono::seconds(10)));
  const Json body = {{"model", kModelName}, {"prompt", kChatPrompt}, {"max_tokens", 320}, {"temperature", 1.0},
                     {"seed", 31},          {"ignore_eos", true},    {"logprobs", 0},     {"return_token_ids", true}};
  auto [status, whole] = Post("/v1/completions", body);
  ASSERT_EQ(status, 200) << whole.dump();
  const std::vector<int32_t> expected_ids = whole["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  const Json& expected_lp = whole["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(expected_ids.size(), 320u);
  // A finished choice's sequence is gone.
  const std::string finished_id = whole["choices"][0]["sequence_id"];
  EXPECT_EQ(Client(*server_).Get("/v1/sequences/" + finished_id)->status, 404);

  Json stream_body = body;
  stream_body["stream"] = true;
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.connected());
  ASSERT_TRUE(connection.Send(PostRequest("/v1/completions", DumpJson(stream_body))));
  const std::string head = connection.ReadUntilCount("\"sequence_id\"", 3);
  ASSERT_NE(head.find("200 OK"), std::string::npos) << head;
  std::vector<Json> chunks = StreamChunks(head);
  ASSERT_FALSE(chunks.empty()) << head;
  const Json id_json = chunks[0]["choices"][0]["sequence_id"];
  ASSERT_TRUE(id_json.is_string()) << chunks[0].dump();
  const std::string id = id_json;
  const std::string path = "/v1/sequences/" + id;

  HttpClient client = Client(*server_);
  Result<HttpResponse> paused = client.Post(path + "/pause", "", "application/json");
  ASSERT_TRUE(paused.ok());
  ASSERT_EQ(paused->status, 200) << paused->body;
  Json info = ParseJson(paused->body).value();
  EXPECT_EQ(info["id"], id);
  EXPECT_EQ(info["object"], "sequence");
  EXPECT_EQ(info["state"], "paused");
  EXPECT_GT(info["generated_tokens"].get<int64_t>(), 0);
  EXPECT_LT(info["generated_tokens"].get<int64_t>(), 320);
  EXPECT_EQ(info["prompt_tokens"], Encode(kChatPrompt).size());
  EXPECT_GT(info["kv_blocks"].get<int64_t>(), 0);
  // Nothing moves while paused.
  std::this_thread::sleep_for(milliseconds(150));
  Result<Json> later = client.GetJson(path);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ((*later)["state"], "paused");
  EXPECT_EQ((*later)["generated_tokens"], info["generated_tokens"]);
  EXPECT_EQ((*later)["kv_blocks"], info["kv_blocks"]);
  Result<HttpResponse> again = client.Post(path + "/pause", "", "application/json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 409) << again->body;
  EXPECT_EQ(ParseJson(again->body).value()["error"]["code"], "sequence_state_conflict");

  Result<HttpResponse> resumed = client.Post(path + "/resume", "", "application/json");
  ASSERT_TRUE(resumed.ok());
  ASSERT_EQ(resumed->status, 200) << resumed->body;
  const std::string state = ParseJson(resumed->body).value()["state"];
  EXPECT_TRUE(state == "running" || state == "waiting") << state;
  Result<HttpResponse> resumed_again = client.Post(path + "/resume", "", "application/json");
  ASSERT_TRUE(resumed_again.ok());
  // 409 while it runs (404 if it has finished already).
  EXPECT_TRUE(resumed_again->status == 409 || resumed_again->status == 404) << resumed_again->body;

  const std::string all = connection.ReadUntil("data: [DONE]");
  ASSERT_NE(all.find("data: [DONE]"), std::string::npos) << all.substr(all.size() > 2000 ? all.size() - 2000 : 0);
  std::vector<int32_t> ids;
  std::vector<uint32_t> bits;
  for (const Json& chunk : StreamChunks(all)) {
    for (const Json& c : chunk["choices"]) {
      EXPECT_EQ(c["sequence_id"], id);
      for (const Json& t : c["token_ids"]) ids.push_back(t.get<int32_t>());
      for (const Json& lp : c["logprobs"]["token_logprobs"]) bits.push_back(FloatBits(lp));
    }
  }
  EXPECT_EQ(ids, expected_ids);
  ASSERT_EQ(bits.size(), expected_lp.size());
  for (size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(bits[i], FloatBits(expected_lp[i])) << "token " << i;
  EXPECT_EQ(client.Get(path)->status, 404);
}

TEST_F(OpenAiServerTest, SequenceRoutesAnswer404ForUnknownAnd401WithoutTheKey) {
  HttpClient client = Client(*server_);
  for (const std::string id : {"999999999", "abc", "0", "-1", "123456789012345678901234"}) {
    Result<HttpResponse> get = client.Get("/v1/sequences/" + id);
    ASSERT_TRUE(get.ok());
    EXPECT_EQ(get->status, 404) << id << " " << get->body;
    EXPECT_EQ(ParseJson(get->body).value()["error"]["code"], "sequence_not_found") << get->body;
    for (const char* action : {"/pause", "/resume"}) {
      Result<HttpResponse> post = client.Post("/v1/sequences/" + id + action, "", "application/json");
      ASSERT_TRUE(post.ok());
      EXPECT_EQ(post->status, 404) << id << action << " " << post->body;
    }
  }
  // Both choices carry their own sequence_id, in a whole reply and in a stream.
  auto [status, reply] = Post("/v1/chat/completions",
                              {{"model", kModelName},
                               {"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})},
                               {"max_tokens", 3},
                               {"n", 2}});
  ASSERT_EQ(status, 200) << reply.dump();
  ASSERT_TRUE(reply["choices"][0]["sequence_id"].is_string()) << reply.dump();
  EXPECT_NE(reply["choices"][0]["sequence_id"], reply["choices"][1]["sequence_id"]);
  EXPECT_EQ(client.Get("/v1/sequences/" + reply["choices"][1]["sequence_id"].get<std::string>())->status, 404);

  std::unique_ptr<OpenAiServer> secured = StartServer("k3y");
  ASSERT_NE(secured, nullptr);
  EXPECT_EQ(Client(*secured).Get("/v1/sequences/1")->status, 401);
  EXPECT_EQ(Client(*secured).Post("/v1/sequences/1/pause", "", "application/json")->status, 401);
  EXPECT_EQ(Client(*secured, "wrong").Post("/v1/sequences/1/resume", "", "application/json")->status, 401);
  EXPECT_EQ(Client(*secured, "k3y").Get("/v1/sequences/999999999")->status, 404);
  const Json score = {{"model", kModelName}, {"prompt_token_ids", {1}}, {"token_ids", {2}}};
  EXPECT_EQ(Client(*secured).Post("/v1/score", DumpJson(score), "application/json")->status, 401);
  EXPECT_EQ(Client(*secured, "k3y").Post("/v1/score", DumpJson(score), "application/json")->status, 200);
}

TEST_F(OpenAiServerTest, ScoreErrorsName400sField) {
  const std::vector<int32_t> prompt = Encode("hello");
  const Json base = {{"model", kModelName}, {"prompt_token_ids", prompt}, {"token_ids", {5, 6, 7}}};
  auto with = [&](const Json& fields) {
    Json body = base;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it->is_null()) {
        body.erase(it.key());
      } else {
        body[it.key()] = *it;
      }
    }
    return Post("/v1/score", body);
  };
  ExpectError(with({{"token_ids", nullptr}}), 400, "token_ids");
  ExpectError(with({{"token_ids", Json::array()}}), 400, "token_ids");
  ExpectError(with({{"token_ids", "abc"}}), 400, "token_ids");
  ExpectError(with({{"token_ids", {5, -1}}}), 400, "token_ids");
  ExpectError(with({{"prompt_token_ids", nullptr}}), 400, "prompt_token_ids");
  ExpectError(with({{"prompt_token_ids", Json::array()}}), 400, "prompt_token_ids");
  auto outside = with({{"token_ids", {5, 6, 999999}}});
  ExpectError(outside, 400, "token_ids");
  EXPECT_NE(outside.second["error"]["message"].get<std::string>().find("position 2"), std::string::npos)
      << outside.second.dump();
  auto prompt_outside = with({{"prompt_token_ids", {1, 999999}}});
  ExpectError(prompt_outside, 400, "prompt_token_ids");
  EXPECT_NE(prompt_outside.second["error"]["message"].get<std::string>().find("position 1"), std::string::npos);
  ExpectError(with({{"temperature", 7}}), 400, "temperature");
  ExpectError(with({{"temperature", -0.5}}), 400, "temperature");
  ExpectError(with({{"temperature", "hot"}}), 400, "temperature");
  ExpectError(with({{"top_logprobs", 21}}), 400, "top_logprobs");
  ExpectError(with({{"top_logprobs", -1}}), 400, "top_logprobs");
  ExpectError(with({{"format", "bf16"}}), 400, "format");
  ExpectError(with({{"full_vocab", true}}), 400, "format");
  ExpectError(with({{"format", "f32"}}), 400, "full_vocab");
  ExpectError(with({{"format", "f32"}, {"full_vocab", true}, {"top_logprobs", 2}}), 400, "top_logprobs");
  ExpectError(with({{"full_vocab", "yes"}}), 400, "full_vocab");
  ExpectError(with({{"model", nullptr}}), 400, "model");
  auto unknown = with({{"model", "gpt-4"}});
  ExpectError(unknown, 404, "model");
  EXPECT_EQ(unknown.second["error"]["code"], "model_not_found");
  ExpectError(PostText("/v1/score", "{\"model\": "), 400, "");

  const int64_t limit = engine_->max_model_len();
  auto too_long = with({{"token_ids", std::vector<int32_t>(static_cast<size_t>(limit), 5)}});
  ExpectError(too_long, 400, "token_ids");
  EXPECT_EQ(too_long.second["error"]["code"], "context_length_exceeded");
  EXPECT_NE(too_long.second["error"]["message"].get<std::string>().find(std::to_string(limit)), std::string::npos);

  // At the edge, on an engine with a short context (so the test stays fast):
  // exactly the context fits, since the last token needs no room after it.
  EngineOptions options;
  options.threads = 2;
  options.kv_memory_bytes = 8ll << 20;
  options.max_model_len = 48;
  std::unique_ptr<Engine> small = Engine::Start(*model_, tokenizer_, options).value();
  OpenAiServerOptions server_options;
  server_options.port = 0;
  server_options.model_name = kModelName;
  std::unique_ptr<OpenAiServer> server = OpenAiServer::Start(small.get(), tokenizer_, server_options).value();
  auto score = [&](size_t scored) {
    const Json body = {{"model", kModelName}, {"prompt_token_ids", prompt},
                       {"token_ids", std::vector<int32_t>(scored, 5)}};
    Result<HttpResponse> reply = Client(*server).Post("/v1/score", DumpJson(body), "application/json");
    EXPECT_TRUE(reply.ok());
    return std::make_pair(reply.ok() ? reply->status : 0, reply.ok() ? ParseJson(reply->body).value() : Json());
  };
  auto fits = score(48 - prompt.size());
  ASSERT_EQ(fits.first, 200) << fits.second.dump();
  EXPECT_EQ(fits.second["logprobs"].size(), 48 - prompt.size());
  auto over = score(49 - prompt.size());
  ExpectError(over, 400, "token_ids");
  EXPECT_EQ(over.second["error"]["code"], "context_length_exceeded");
  EXPECT_NE(over.second["error"]["message"].get<std::string>().find("is 48 tokens"), std::string::npos)
      << over.second.dump();
  server->Stop();
}

// POST /v1/weights and GET /v1/weights, min_version and pin_version, each
// test on its own engine and a server with a checkpoint root holding a copy
// of the served model.
class OpenAiWeightsTest : public OpenAiServerTest {
 protected:
  void SetUp() override {
    testing::CopyCheckpoint("models/default", Root() + "/ckpt");
    EngineOptions options;
    options.threads = 2;
    options.kv_memory_bytes = 32ll << 20;
    auto engine = Engine::Start(*model_, tokenizer_, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_here_ = std::move(engine).value();
    OpenAiServerOptions server_options;
    server_options.port = 0;
    server_options.model_name = kModelName;
    server_options.checkpoint_root = Root();
    auto server = OpenAiServer::Start(engine_here_.get(), tokenizer_, server_options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_here_ = std::move(server).value();
  }
  void TearDown() override {
    server_here_.reset();
    engine_here_.reset();
  }

  std::string Root() const { return dir_.path() + "/root"; }

  std::pair<int, Json> PostHere(const std::string& path, const Json& body) {
    Result<HttpResponse> reply = Client(*server_here_).Post(path, DumpJson(body), "application/json");
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return {0, nullptr};
    return {reply->status, ParseJson(reply->body).value()};
  }
  std::pair<int, Json> LoadWeights(const std::string& path, int64_t version) {
    return PostHere("/v1/weights", {{"path", path}, {"version", version}});
  }
  Json WeightsState() {
    Result<Json> state = Client(*server_here_).GetJson("/v1/weights");
    EXPECT_TRUE(state.ok()) << state.status().ToString();
    return state.ok() ? *state : Json();
  }
  // Polls GET /v1/weights until no load is pending.
  Json Settled() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    Json state = WeightsState();
    while (!state["pending_version"].is_null() && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
      state = WeightsState();
    }
    return state;
  }
  std::pair<int, Json> Greedy(const Json& extra = Json::object()) {
    Json body = {{"model", kModelName}, {"prompt", kChatPrompt}, {"max_tokens", 8}, {"temperature", 0}};
    body.update(extra);
    return PostHere("/v1/completions", body);
  }

  testing::TempDir dir_;
  std::unique_ptr<Engine> engine_here_;
  std::unique_ptr<OpenAiServer> server_here_;
};

TEST_F(OpenAiServerTest, WeightsWithoutACheckpointRootAre403) {
  auto [status, reply] = Post("/v1/weights", {{"path", "ckpt"}, {"version", 1}});
  ExpectError({status, reply}, 403, "path");
  EXPECT_NE(reply["error"]["message"].get<std::string>().find("no checkpoint root is configured"), std::string::npos)
      << reply.dump();
  Result<Json> state = Client(*server_).GetJson("/v1/weights");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ((*state)["checkpoint_root_configured"], false);
  EXPECT_EQ(Client(*server_, "").Post("/v1/weights", "{", "application/json")->status, 400);
}

TEST_F(OpenAiWeightsTest, EscapesAre403) {
  ASSERT_EQ(::symlink(std::filesystem::absolute("models/default").c_str(), (Root() + "/out").c_str()), 0);
  testing::CopyCheckpoint("models/default", Root() + "/fifo");
  ASSERT_EQ(::unlink((Root() + "/fifo/model.safetensors").c_str()), 0);
  ASSERT_EQ(::mkfifo((Root() + "/fifo/model.safetensors").c_str(), 0600), 0);
  testing::CopyCheckpoint("models/default", Root() + "/device");
  ASSERT_EQ(::unlink((Root() + "/device/config.json").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/null", (Root() + "/device/config.json").c_str()), 0);
  testing::CopyCheckpoint("models/default", Root() + "/directory");
  ASSERT_EQ(::unlink((Root() + "/directory/config.json").c_str()), 0);
  ASSERT_EQ(::mkdir((Root() + "/directory/config.json").c_str(), 0700), 0);
  for (const std::string& path : {Root() + "/ckpt", std::string("../root/ckpt"), std::string("ckpt/../../root/ckpt"),
                                  std::string("out"), std::string("fifo"), std::string("device"),
                                  std::string("directory")}) {
    // A FIFO must be refused at once, not waited on: bound each request.
    auto reply = std::async(std::launch::async, [&] { return LoadWeights(path, 1); });
    if (reply.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      const int writer = ::open((Root() + "/fifo/model.safetensors").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      ADD_FAILURE() << path << ": the request hung";
      reply.wait();
      if (writer >= 0) ::close(writer);
      continue;
    }
    auto answer = reply.get();
    ExpectError(answer, 403, "path");
    EXPECT_NE(answer.second["error"]["message"].get<std::string>().find(path), std::string::npos)
        << answer.second.dump();
  }
  const Json state = WeightsState();
  EXPECT_EQ(state["version"], 0);
  EXPECT_TRUE(state["pending_version"].is_null());
  EXPECT_EQ(state["checkpoint_root_configured"], true);
}

TEST_F(OpenAiWeightsTest, AMismatchingTensorIs400AndTheOldWeightsKeepServing) {
  auto [before_status, before] = Greedy({{"return_token_ids", true}});
  ASSERT_EQ(before_status, 200) << before.dump();
  testing::EditSafetensorsHeader(Root() + "/ckpt/model.safetensors",
                                 [](Json& h) { h["model.norm.weight"]["shape"] = {16, 16}; });
  auto mismatch = LoadWeights("ckpt", 1);
  ExpectError(mismatch, 400, "model.norm.weight");
  EXPECT_NE(mismatch.second["error"]["message"].get<std::string>().find(
                "tensor 'model.norm.weight': shape [16, 16] is not [256]"),
            std::string::npos)
      << mismatch.second.dump();
  const Json state = WeightsState();
  EXPECT_EQ(state["version"], 0);
  EXPECT_TRUE(state["pending_version"].is_null());
  auto [after_status, after] = Greedy({{"return_token_ids", true}});
  ASSERT_EQ(after_status, 200) << after.dump();
  EXPECT_EQ(after["choices"][0]["token_ids"], before["choices"][0]["token_ids"]);
  ExpectError(LoadWeights("missing", 1), 404, "path");
}

TEST_F(OpenAiWeightsTest, AnotherSettingIs400NamingItsKey) {
  // Main answered 202 and served the checkpoint with its own rope theta.
  const std::string config = Root() + "/ckpt/config.json";
  Json edited = ParseJson(testing::ReadWholeFile(config)).value();
  edited["rope_parameters"]["rope_theta"] = 1000000.0;
  testing::WriteWholeFile(config, edited.dump());
  auto refused = LoadWeights("ckpt", 1);
  ExpectError(refused, 400, "rope_theta");
  EXPECT_NE(refused.second["error"]["message"].get<std::string>().find("rope_theta: 1000000 is not 10000"),
            std::string::npos)
      << refused.second.dump();
  EXPECT_EQ(WeightsState()["version"], 0);
}

TEST_F(OpenAiWeightsTest, BytesThatDifferFromTheManifestFailTheLoadAndTheOldWeightsKeepServing) {
  auto [before_status, before] = Greedy({{"return_token_ids", true}});
  ASSERT_EQ(before_status, 200) << before.dump();
  const std::string weights = Root() + "/ckpt/model.safetensors";
  {
    Result<std::unique_ptr<ModelFiles>> files = ModelFiles::Load(Root() + "/ckpt");
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    testing::WriteWholeFile(Root() + "/ckpt/manifest.json", ManifestJson(**files).value().dump());
  }
  std::string bytes = testing::ReadWholeFile(weights);
  bytes[bytes.size() - 3] ^= 0x40;  // inside the last tensor's data
  testing::WriteWholeFile(weights, bytes);
  auto accepted = LoadWeights("ckpt", 1);
  ASSERT_EQ(accepted.first, 202) << accepted.second.dump();  // the headers agree; the bytes are read after
  const Json state = Settled();
  EXPECT_EQ(state["version"], 0) << state.dump();
  EXPECT_EQ(state["last_error"]["version"], 1) << state.dump();
  EXPECT_NE(state["last_error"]["message"].get<std::string>().find("is not the manifest's"), std::string::npos)
      << state.dump();
  auto [after_status, after] = Greedy({{"return_token_ids", true}});
  ASSERT_EQ(after_status, 200) << after.dump();
  EXPECT_EQ(after["choices"][0]["token_ids"], before["choices"][0]["token_ids"]);
}

TEST_F(OpenAiWeightsTest, ALoadIs202ThenServesTheNewVersionAndVersionsMustRise) {
  auto accepted = LoadWeights("ckpt", 2);
  ASSERT_EQ(accepted.first, 202) << accepted.second.dump();
  EXPECT_EQ(accepted.second["status"], "loading");
  EXPECT_EQ(accepted.second["version"], 2);
  // min_version holds the request until version 2 serves it.
  auto [status, reply] = Greedy({{"min_version", 2}, {"min_version_timeout_ms", 30000}});
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(engine_here_->weight_version(), 2);
  const Json state = Settled();
  EXPECT_EQ(state["version"], 2);
  EXPECT_TRUE(state["last_error"].is_null()) << state.dump();
  for (int64_t version : {1, 2}) {
    auto conflict = LoadWeights("ckpt", version);
    ExpectError(conflict, 409, "version");
    EXPECT_NE(conflict.second["error"]["message"].get<std::string>().find("not above the current weight version 2"),
              std::string::npos)
        << conflict.second.dump();
  }
  // A version that never comes: 504 at the bound.
  ExpectError(Greedy({{"min_version", 9}, {"min_version_timeout_ms", 50}}), 504, "min_version");
  ExpectError(Greedy({{"min_version_timeout_ms", 50}}), 400, "min_version_timeout_ms");
  ExpectError(Greedy({{"min_version", -1}}), 400, "min_version");
  // Room for two versions by default: a pinned request is served.
  auto pinned = Greedy({{"pin_version", true}});
  EXPECT_EQ(pinned.first, 200) << pinned.second.dump();
  ExpectError(Greedy({{"pin_version", 1}}), 400, "pin_version");
  ExpectError(PostHere("/v1/weights", {{"path", "ckpt"}}), 400, "version");
  ExpectError(PostHere("/v1/weights", {{"path", "ckpt"}, {"version", 0}}), 400, "version");
  ExpectError(PostHere("/v1/weights", {{"version", 3}}), 400, "path");
}

TEST_F(OpenAiServerTest, APinTheWeightMemoryHasNoRoomForIsRefusedWith400) {
  EngineOptions options;
  options.threads = 2;
  options.kv_memory_bytes = 32ll << 20;
  options.weight_memory_bytes = model_->WeightBytes();  // one version
  auto engine = Engine::Start(*model_, tokenizer_, options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  OpenAiServerOptions server_options;
  server_options.port = 0;
  server_options.model_name = kModelName;
  auto server = OpenAiServer::Start(engine->get(), tokenizer_, server_options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const Json body = {{"model", kModelName}, {"prompt", "hi"}, {"max_tokens", 2}, {"pin_version", true}};
  Result<HttpResponse> reply = Client(**server).Post("/v1/completions", DumpJson(body), "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 400) << reply->body;
  const Json error = ParseJson(reply->body).value()["error"];
  EXPECT_EQ(error["param"], "pin_version") << error.dump();
  EXPECT_EQ(error["message"].get<std::string>().rfind("pin_version: two resident weight versions need ", 0), 0u)
      << error.dump();
}

TEST_F(OpenAiWeightsTest, SwappingToIdenticalWeightsChangesNoGreedyToken) {
  const Json body = {{"model", kModelName}, {"prompt", kChatPrompt}, {"max_tokens", 96},
                     {"temperature", 0},    {"ignore_eos", true},    {"return_token_ids", true}};
  auto [status, whole] = PostHere("/v1/completions", body);
  ASSERT_EQ(status, 200) << whole.dump();
  const std::vector<int32_t> expected = whole["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), 96u);

  Json stream_body = body;
  stream_body["stream"] = true;
  RawConnection connection(server_here_->port());
  ASSERT_TRUE(connection.connected());
  ASSERT_TRUE(connection.Send(PostRequest("/v1/completions", DumpJson(stream_body))));
  const std::string head = connection.ReadUntilCount("\"sequence_id\"", 3);
  std::vector<Json> chunks = StreamChunks(head);
  ASSERT_FALSE(chunks.empty()) << head;
  const std::string sequence = "/v1/sequences/" + chunks[0]["choices"][0]["sequence_id"].get<std::string>();
  // Paused, so that the swap lands in the middle of the generation.
  HttpClient client = Client(*server_here_);
  Result<HttpResponse> paused = client.Post(sequence + "/pause", "", "application/json");
  ASSERT_TRUE(paused.ok());
  ASSERT_EQ(paused->status, 200) << paused->body;
  ASSERT_EQ(LoadWeights("ckpt", 1).first, 202);
  EXPECT_EQ(Settled()["version"], 1);
  ASSERT_EQ(client.Post(sequence + "/resume", "", "application/json")->status, 200);

  const std::string all = connection.ReadUntil("data: [DONE]");
  std::vector<int32_t> ids;
  for (const Json& chunk : StreamChunks(all)) {
    for (const Json& c : chunk["choices"]) {
      for (const Json& t : c["token_ids"]) ids.push_back(t.get<int32_t>());
    }
  }
  EXPECT_EQ(ids, expected);
}

}  // namespace
}  // namespace flashroll::engine
