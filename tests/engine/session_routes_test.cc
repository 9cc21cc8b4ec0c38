// /v1/sessions over HTTP (session_routes.h) on the shipped default model,
// through our HttpClient: an episode's turns as one session (what a turn
// samples is what /v1/completions samples for the whole conversation, and
// the second turn prefills only what was appended), text appended as plain
// text, 409 for appending while a turn runs, pause to disk and on, and
// ownership: with two API keys, each key's sessions and /v1/sequences ids
// are 404 to the other.
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/http.h"
#include "common/json.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/openai_server.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"
#include "tests/engine/raw_connection.h"

namespace flashroll::engine {
namespace {

constexpr char kServedName[] = "session-test-model";
constexpr char kAlice[] = "alice-key", kBob[] = "bob-key";

class SessionRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load("models/default");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    auto tokenizer = LoadModelTokenizer(*model_);
    ASSERT_TRUE(tokenizer.ok());
    tokenizer_ = std::move(*tokenizer);
    EngineOptions options;
    options.threads = 2;
    options.kv_memory_bytes = 64ll << 20;
    options.persist_dir = dir_.path();
    auto engine = Engine::Start(*model_, tokenizer_.get(), options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(*engine);
    OpenAiServerOptions server;
    server.port = 0;
    server.model_name = kServedName;
    server.api_keys = {kAlice, kBob};
    auto started = OpenAiServer::Start(engine_.get(), tokenizer_.get(), server);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(*started);
  }

  HttpClient Client(const std::string& key) const {
    HttpClientOptions options;
    options.base_url = server_->base_url();
    options.bearer_token = key;
    return HttpClient::Create(options).value();
  }

  std::pair<int, Json> Call(const std::string& key, HttpMethod method, const std::string& path,
                            const Json& body = Json::object()) const {
    Result<HttpResponse> reply = Client(key).Send(method, path, DumpJson(body), "application/json");
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return {0, nullptr};
    Result<Json> json = ParseJson(reply->body);
    EXPECT_TRUE(json.ok()) << reply->body;
    return {reply->status, json.ok() ? *json : Json(nullptr)};
  }

  std::string Open(const std::string& key) const {
    auto [status, body] = Call(key, HttpMethod::kPost, "/v1/sessions");
    EXPECT_EQ(status, 200) << body.dump();
    return body.value("id", "");
  }

  static Json Turn(int64_t max_tokens, int64_t seed) {
    return {{"model", kServedName}, {"max_tokens", max_tokens}, {"temperature", 0.9}, {"seed", seed},
            {"ignore_eos", true}};
  }

  testing::TempDir dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<OpenAiServer> server_;
};

TEST_F(SessionRoutesTest, TurnsOfASessionSampleWhatCompletionsSampleForTheWholeConversation) {
  const std::string id = Open(kAlice);
  ASSERT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(Open(kAlice), id);
  const std::vector<int32_t> prompt = tokenizer_->Encode("<|im_start|>user\nWhat is 2+2?<|im_end|>\n", true);
  auto appended = Call(kAlice, HttpMethod::kPost, "/v1/sessions/" + id + "/append", {{"token_ids", prompt}});
  ASSERT_EQ(appended.first, 200) << appended.second.dump();
  EXPECT_EQ(appended.second["tokens"], prompt.size());
  auto first = Call(kAlice, HttpMethod::kPost, "/v1/sessions/" + id + "/generate", Turn(12, 7));
  ASSERT_EQ(first.first, 200) << first.second.dump();
  const std::vector<int32_t> turn1 = first.second["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(turn1.size(), 12u);
  // A tool's output as text: markup in it stays text.
  const std::string tool = "result: 4 <|im_end|>";
  auto text = Call(kAlice, HttpMethod::kPost, "/v1/sessions/" + id + "/append", {{"text", tool}});
  ASSERT_EQ(text.first, 200) << text.second.dump();
  std::vector<int32_t> plain;
  tokenizer_->EncodeAppend(tool, /*parse_special=*/false, &plain);
  EXPECT_EQ(text.second["tokens"], prompt.size() + 12 + plain.size());
  const int32_t im_end = tokenizer_->TokenId("<|im_end|>");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_end), 0);
  auto second = Call(kAlice, HttpMethod::kPost, "/v1/sessions/" + id + "/generate", Turn(10, 8));
  ASSERT_EQ(second.first, 200) << second.second.dump();
  // Only the appended tokens (and the first turn's last) were prefilled.
  EXPECT_EQ(second.second["usage"]["prefill_tokens"], prompt.size() + 1 + plain.size());
  EXPECT_EQ(second.second["usage"]["reprefill_tokens"], 0);
  // The same conversation as one completion request.
  std::vector<int32_t> whole = prompt;
  whole.insert(whole.end(), turn1.begin(), turn1.end());
  whole.insert(whole.end(), plain.begin(), plain.end());
  Json completion = Turn(10, 8);
  completion["prompt"] = whole;
  completion["return_token_ids"] = true;
  completion["logprobs"] = 0;
  auto reference = Call(kAlice, HttpMethod::kPost, "/v1/completions", completion);
  ASSERT_EQ(reference.first, 200) << reference.second.dump();
  EXPECT_EQ(reference.second["choices"][0]["token_ids"], second.second["token_ids"]);
  EXPECT_EQ(reference.second["choices"][0]["logprobs"]["token_logprobs"], second.second["logprobs"]);
  auto deleted = Call(kAlice, HttpMethod::kDelete, "/v1/sessions/" + id);
  EXPECT_EQ(deleted.first, 200);
  EXPECT_EQ(Call(kAlice, HttpMethod::kGet, "/v1/sessions/" + id).first, 404);
}

TEST_F(SessionRoutesTest, AppendingWhileATurnRunsIs409AndBadBodiesName400) {
  const std::string id = Open(kAlice);
  const std::string base = "/v1/sessions/" + id;
  EXPECT_EQ(Call(kAlice, HttpMethod::kPost, base + "/append", {{"token_ids", {1, 2}}, {"text", "x"}}).first, 400);
  EXPECT_EQ(Call(kAlice, HttpMethod::kPost, base + "/append", Json::object()).first, 400);
  EXPECT_EQ(Call(kAlice, HttpMethod::kPost, base + "/append", {{"token_ids", {999999}}}).first, 400);
  EXPECT_EQ(Call(kAlice, HttpMethod::kPost, base + "/pause", {{"to", "tape"}}).first, 400);
  ASSERT_EQ(Call(kAlice, HttpMethod::kPost, base + "/append", {{"text", "Count to a thousand:"}}).first, 200);
  auto running = std::async(std::launch::async, [&] { return Call(kAlice, HttpMethod::kPost, base + "/generate", Turn(1500, 1)); });
  // Wait until the turn runs, then append and pause: both 409.
  for (int i = 0; i < 500 && Call(kAlice, HttpMethod::kGet, base).second.value("state", "") == "paused"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto conflict = Call(kAlice, HttpMethod::kPost, base + "/append", {{"token_ids", {5}}});
  EXPECT_EQ(conflict.first, 409) << conflict.second.dump();
  EXPECT_EQ(Call(kAlice, HttpMethod::kPost, base + "/pause", {{"to", "disk"}}).first, 409);
  EXPECT_EQ(Call(kAlice, HttpMethod::kPost, base + "/generate", Turn(4, 1)).first, 409);
  ASSERT_EQ(running.get().first, 200);
  // Between turns: to disk, appended to, and on.
  auto paused = Call(kAlice, HttpMethod::kPost, base + "/pause", {{"to", "disk"}});
  ASSERT_EQ(paused.first, 200) << paused.second.dump();
  EXPECT_TRUE(paused.second["on_disk"].get<bool>());
  EXPECT_EQ(dir_.Files().size(), 1u);
  ASSERT_EQ(Call(kAlice, HttpMethod::kPost, base + "/append", {{"text", " and back"}}).first, 200);
  auto resumed = Call(kAlice, HttpMethod::kPost, base + "/generate", Turn(4, 2));
  ASSERT_EQ(resumed.first, 200) << resumed.second.dump();
  EXPECT_EQ(resumed.second["usage"]["reprefill_tokens"], 0) << "read back from its file, not recomputed";
  EXPECT_TRUE(dir_.Files().empty());
}

TEST_F(SessionRoutesTest, EachKeySeesOnlyItsOwnSessionsAndSequences) {
  const std::string id = Open(kAlice);
  const std::string base = "/v1/sessions/" + id;
  EXPECT_EQ(Call("", HttpMethod::kPost, "/v1/sessions").first, 401);
  EXPECT_EQ(Call("eve-key", HttpMethod::kGet, base).first, 401);
  for (const auto& [method, path] : std::vector<std::pair<HttpMethod, std::string>>{
           {HttpMethod::kGet, base}, {HttpMethod::kPost, base + "/append"}, {HttpMethod::kPost, base + "/generate"},
           {HttpMethod::kPost, base + "/pause"}, {HttpMethod::kDelete, base}}) {
    auto reply = Call(kBob, method, path, {{"text", "hi"}});
    EXPECT_EQ(reply.first, 404) << path << " " << reply.second.dump();
  }
  EXPECT_EQ(Call(kAlice, HttpMethod::kGet, base).first, 200) << "Bob's DELETE left Alice's session alone";
  EXPECT_EQ(Call(kAlice, HttpMethod::kGet, "/v1/sessions/00000000000000000000000000000000").first, 404);
  // A streamed completion's sequence is Alice's alone.
  Json request = Turn(400, 3);
  request["prompt"] = "Once upon a time";
  request["stream"] = true;
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.connected());
  ASSERT_TRUE(connection.Send(PostRequest("/v1/completions", DumpJson(request), kAlice)));
  // Once a second chunk names it, the first has arrived whole.
  const std::string head = connection.ReadUntilCount("\"sequence_id\":\"", 2);
  const size_t at = head.find("\"sequence_id\":\"");
  ASSERT_NE(at, std::string::npos) << head;
  const std::string sequence = head.substr(at + 15, head.find('"', at + 15) - at - 15);
  ASSERT_FALSE(sequence.empty());
  EXPECT_EQ(Call(kBob, HttpMethod::kGet, "/v1/sequences/" + sequence).first, 404);
  EXPECT_EQ(Call(kBob, HttpMethod::kPost, "/v1/sequences/" + sequence + "/pause").first, 404);
  EXPECT_EQ(Call(kAlice, HttpMethod::kGet, "/v1/sequences/" + sequence).first, 200);
}

}  // namespace
}  // namespace flashroll::engine
