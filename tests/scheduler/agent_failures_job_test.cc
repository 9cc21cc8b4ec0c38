// Issue 22 item 1 at the level of the job: a scripted agent, served over
// the job's own policy.url route, whose commands make its sandbox fail in
// every way an agent can — OOM inside its cgroup, the pids limit, a tool
// timeout, ENOSPC — gets every sample rewarded: no failure kind, nothing
// superseded or re-run, no task quarantined. (The episode-level tests in
// tests/rollout/failure_kinds_test.cc show such episodes carry no kind; this
// shows the job acts on that, end to end, through real sandboxes.)
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/store.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/scaffold.h"
#include "scheduler/job_config.h"
#include "scheduler/rl_job.h"

namespace flashroll {
namespace {

using Json = nlohmann::json;

// What the agent runs in its one tool call, per task id.
const std::map<std::string, std::string>& Commands() {
  static const std::map<std::string, std::string> commands = {
      {"oom", "python3 -c 'x = bytearray(1 << 30); print(len(x))'"},
      {"pids", "for i in $(seq 64); do sleep 3 & done; wait"},
      {"timeout", "sleep 30"},
      {"enospc", "dd if=/dev/zero of=big bs=1M count=128"},
  };
  return commands;
}

// An OpenAI-compatible /v1/completions endpoint that plays a fixed agent:
// on its first turn in an episode the failing command of the task the
// prompt names ("Case <id>."), then the right answer, 42. Turns are counted
// from the assistant messages already in the prompt, so any number of
// episodes can run at once.
class ScriptedAgentServer {
 public:
  explicit ScriptedAgentServer(const engine::Tokenizer& tokenizer) : tokenizer_(tokenizer) {
    const Scaffold& scaffold = *FindScaffold("bash_block");
    server_.Post("/v1/completions", [this, &scaffold](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body);
      const std::string prompt = tokenizer_.Decode(body.at("prompt").get<std::vector<int32_t>>());
      std::string message = scaffold.RenderAnswer("Done.", "42");
      if (CountOf(prompt, "<|im_start|>assistant") == 1) {
        for (const auto& [id, command] : Commands()) {
          if (prompt.find("Case " + id + ".") != std::string::npos) message = scaffold.RenderToolCall("Run it.", command);
        }
      }
      std::vector<int32_t> ids = tokenizer_.Encode(message, /*parse_special=*/false);
      ids.push_back(tokenizer_.TokenId("<|im_end|>"));
      const Json reply = {{"choices", {{{"token_ids", ids},
                                         {"logprobs", {{"token_logprobs", std::vector<float>(ids.size(), -0.25f)}}}}}}};
      res.set_content(reply.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~ScriptedAgentServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  static int CountOf(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
    return n;
  }

  const engine::Tokenizer& tokenizer_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(AgentFailuresJobTest, AnAgentsOwnSandboxFailuresAreRewardedNeverRetriedOrQuarantined) {
  char pattern[] = "/tmp/agent_failures_job.XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  auto tokenizer = engine::Tokenizer::FromHuggingFace("models/default/tokenizer.json",
                                                      "models/default/tokenizer_config.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  ScriptedAgentServer agent(**tokenizer);

  std::ofstream(dir + "/tasks.jsonl")
      << R"({"id": "oom", "prompt": "Case oom. What is 6 * 7?", "answer": "42", "environment": {"memory": "64M"}})"
      << "\n"
      << R"({"id": "pids", "prompt": "Case pids. What is 6 * 7?", "answer": "42", "environment": {"pids": 16}})"
      << "\n"
      << R"({"id": "timeout", "prompt": "Case timeout. What is 6 * 7?", "answer": "42"})" << "\n"
      << R"({"id": "enospc", "prompt": "Case enospc. What is 6 * 7?", "answer": "42", "environment": {"disk": "16M"}})"
      << "\n";
  const std::string path = dir + "/agent-failures.yaml";
  std::ofstream(path) << "kind: rl_job\nname: agent-failures\nstore: " << dir << "/store.db\n"
                      << "model: {path: models/default, threads: 1}\n"
                      << "policy: {url: '" << agent.url() << "', model: scripted}\n"
                      << "tasks: {files: [" << dir << "/tasks.jsonl]}\n"
                      << "rollout: {scaffold: bash_block, max_turns: 3, max_tokens: 512, efforts: [50]}\n"
                      << "sandbox: {timeout: 1s}\n"
                      << "scheduler: {group_size: 2, max_in_flight: 8, max_per_task: 2, infra_retries: 2}\n"
                      << "training: none\n";
  auto file = LoadYamlFile(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto config = ParseJobConfig(*file);
  ASSERT_TRUE(config.ok()) << config.status().ToString();

  auto summary = RunRlJob(*config, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->groups_done, 4);
  EXPECT_TRUE(summary->failure_kinds.empty()) << summary->ToJson().dump();
  EXPECT_TRUE(summary->quarantined_tasks.empty()) << summary->ToJson().dump();

  auto db = store::OpenStore(dir + "/store.db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  // Every slot ran once, was judged and rewarded (the answer is right).
  auto samples = (*db)->Prepare(
      "SELECT t.source_key, s.status, s.failure_kind, s.reward, s.error FROM samples s JOIN tasks t ON t.id = s.task_id");
  ASSERT_TRUE(samples.ok());
  std::map<std::string, int> per_task;
  while (*samples->Step()) {
    const std::string task = samples->ColumnText(0);
    per_task[task] += 1;
    EXPECT_EQ(samples->ColumnText(1), "completed") << task << ": " << samples->ColumnText(4);
    EXPECT_TRUE(samples->IsNull(2)) << task << ": classified " << samples->ColumnText(2);
    ASSERT_FALSE(samples->IsNull(3)) << task << ": not rewarded";
    EXPECT_GT(samples->ColumnDouble(3), 0) << task;
  }
  EXPECT_EQ(per_task, (std::map<std::string, int>{{"enospc", 2}, {"oom", 2}, {"pids", 2}, {"timeout", 2}}));

  // And the commands did fail as meant, inside the sandboxes.
  auto results = (*db)->Prepare(
      "SELECT t.source_key, u.tool_result_json FROM turns u JOIN samples s ON s.id = u.sample_id"
      " JOIN tasks t ON t.id = s.task_id WHERE u.tool_result_json IS NOT NULL");
  ASSERT_TRUE(results.ok());
  std::map<std::string, int> failed;
  while (*results->Step()) {
    const Json result = Json::parse(results->ColumnText(1));
    const std::string task = results->ColumnText(0);
    if (task == "timeout") {
      EXPECT_TRUE(result.at("timed_out").get<bool>()) << result.dump();
    } else {
      EXPECT_NE(result.at("exit_code").get<int>(), 0) << task << ": " << result.dump();
    }
    failed[task] += 1;
  }
  EXPECT_EQ(failed, (std::map<std::string, int>{{"enospc", 2}, {"oom", 2}, {"pids", 2}, {"timeout", 2}}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flashroll
