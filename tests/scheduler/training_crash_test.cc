// Exactly-once training across crashes (docs/TRAINER_API.md, "Exactly once
// across crashes"): the RL job with the bundled GRPO trainer, SIGKILLed
// again and again at times spread over the training phase — the job (then
// `flashroll run --resume`) and the trainer (the job's supervisor restarts
// it) — some of the kills forced by the trainer's test hook
// (FLASHROLL_TEST_HOLD_DIR, python/flashroll/trainers/loop.py) into the
// window between an ack and the publish of the checkpoint that holds it.
// After each recovery the store's consumed set (groups recorded trained,
// each with the version its step went into) must be exactly the groups of
// the steps the last published weights hold: from that checkpoint back to
// version 0 along each one's trained_at_version (step_groups.json), every
// link published, each step's groups the store's for that version, none in
// two steps, and the count the trainer kept equal: no group trained twice
// into the weights, none consumed and lost.
//
// `make test` runs a few kills; `make test-slow` (FLASHROLL_SLOW_TESTS=1)
// 22 of the job and 22 of the trainer (docs/TESTING.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/store.h"
#include "tests/scheduler/job_process_util.h"
#include "tests/slow_tests.h"

namespace flashroll {
namespace {

using scheduler_test::ReadAll;
using Clock = std::chrono::steady_clock;

// What the store says was trained, read in one snapshot.
struct Consumed {
  int64_t published = -1;        // the highest published version (-1: none)
  std::set<int64_t> versions;    // every published version
  std::set<int64_t> groups;      // groups with samples recorded trained
  // Those groups by the version their step went into (acked_into_version),
  // and the version it trained at (trained_at_version).
  std::map<int64_t, std::set<int64_t>> groups_into;
  std::map<int64_t, std::set<int64_t>> trained_at_of;  // into version -> trained_at versions
};

class TrainingJobCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/training_crash_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    hold_dir_ = dir_ + "/hold";
    std::filesystem::create_directories(hold_dir_);
    std::ofstream(dir_ + "/token") << "training-crash-test-token\n";
    ::chmod((dir_ + "/token").c_str(), 0600);
    // The job passes its environment on to the trainer it starts.
    ::setenv("FLASHROLL_TEST_HOLD_DIR", hold_dir_.c_str(), 1);
  }
  void TearDown() override {
    if (job_ > 0) {
      kill(job_, SIGKILL);
      waitpid(job_, nullptr, 0);
    }
    ::unsetenv("FLASHROLL_TEST_HOLD_DIR");
    std::filesystem::remove_all(dir_);
  }

  // The smallest model and rollouts the training tests use; enough tasks
  // that the trainer never runs out, and restarts enough for every kill.
  std::string WriteConfig() {
    const std::string path = dir_ + "/crash.yaml";
    std::ofstream(path) << "kind: rl_job\nname: crash\nstore: " << dir_ << "/store.db\n"
                        << "model: {path: models/default, threads: 2}\n"
                        << "tasks: {families: [arithmetic], count: 2000, seed: 5}\n"
                        << "rollout: {max_turns: 2, max_tokens: 128, efforts: [100]}\n"
                        << "scheduler: {group_size: 2, max_in_flight: 4, max_per_task: 4, batch_groups: 1}\n"
                        << "training:\n  steps: 100000\n  learning_rate: 0.0001\n  restarts: 100\n"
                        << "  command: [/usr/bin/python3, -m, flashroll.trainers.grpo, --keep-checkpoints, '0',"
                           " --threads, '2', --poll-timeout, '2']\n"
                        << "trainer_api: {listen: '127.0.0.1:0', token_file: " << dir_
                        << "/token, lease_timeout: 60s}\n";
    return path;
  }

  // Forks `flashroll run ARGS...`, its output appended to job.log.
  void StartJob(const std::vector<std::string>& args) {
    const std::string log = dir_ + "/job.log";
    job_ = fork();
    if (job_ == 0) {
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(out, 1);
      dup2(out, 2);
      std::vector<char*> argv{const_cast<char*>(FLASHROLL_BIN), const_cast<char*>("run")};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(FLASHROLL_BIN, argv.data());
      _exit(127);
    }
    ASSERT_GT(job_, 0);
  }

  Consumed ReadConsumed() {
    Consumed out;
    auto db = store::OpenStore(dir_ + "/store.db");
    if (!db.ok()) return out;
    // One read transaction: the version and what it made durable together.
    if (!(*db)->Exec("BEGIN").ok()) return out;
    auto versions = (*db)->Prepare("SELECT version FROM weight_versions");
    while (versions.ok() && *versions->Step()) {
      out.versions.insert(versions->ColumnInt64(0));
      out.published = std::max(out.published, versions->ColumnInt64(0));
    }
    auto groups = (*db)->Prepare("SELECT DISTINCT group_id, acked_into_version, trained_at_version FROM samples"
                                 " WHERE trained_at_version IS NOT NULL");
    while (groups.ok() && *groups->Step()) {
      const int64_t group = groups->ColumnInt64(0), into = groups->ColumnInt64(1);
      out.groups.insert(group);
      out.groups_into[into].insert(group);
      out.trained_at_of[into].insert(groups->ColumnInt64(2));
    }
    (void)(*db)->Exec("COMMIT");
    return out;
  }

  // Waits until a version above `version` is published; returns the
  // highest then (or `version` after 3 minutes, or once the job exited).
  int64_t WaitForPublishedAbove(int64_t version) {
    const auto deadline = Clock::now() + std::chrono::minutes(3);
    while (Clock::now() < deadline) {
      if (waitpid(job_, nullptr, WNOHANG) == job_) {
        job_ = -1;
        return version;
      }
      const int64_t published = ReadConsumed().published;
      if (published > version) return published;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return version;
  }

  // The store's consumed set against the steps the last published weights
  // hold: the chain of checkpoints from it back to version 0.
  void ExpectConsumedMatchesTheWeights(const std::string& when) {
    const Consumed consumed = ReadConsumed();
    ASSERT_GE(consumed.published, 1) << when;
    std::set<int64_t> in_weights;
    int64_t groups_trained = -1;  // the count the published checkpoint kept
    for (int64_t version = consumed.published; version > 0;) {
      char name[32];
      std::snprintf(name, sizeof(name), "v%06lld", static_cast<long long>(version));
      const std::string path = dir_ + "/crash-checkpoints/" + name + "/step_groups.json";
      const std::string text = ReadAll(path);
      ASSERT_FALSE(text.empty()) << when << ": no " << path;
      const nlohmann::json step = nlohmann::json::parse(text);
      ASSERT_EQ(step["version"], version) << when << ": " << path;
      EXPECT_TRUE(consumed.versions.count(version)) << when << ": the weights hold " << name << ", never published";
      if (groups_trained < 0) groups_trained = step["groups_trained"].get<int64_t>();
      std::set<int64_t> step_groups;
      for (const auto& g : step["groups"]) {
        const int64_t group = g.get<int64_t>();
        EXPECT_TRUE(step_groups.insert(group).second) << when << ": group " << group << " twice in " << name;
        EXPECT_TRUE(in_weights.insert(group).second) << when << ": group " << group << " trained twice into the weights, "
                                                     << name << " and a later step";
      }
      const auto stored = consumed.groups_into.find(version);
      EXPECT_EQ(step_groups, stored == consumed.groups_into.end() ? std::set<int64_t>{} : stored->second)
          << when << ": the groups " << name << "'s step trained against the store's for that version";
      const int64_t trained_at = step["trained_at_version"].get<int64_t>();
      if (const auto at = consumed.trained_at_of.find(version); at != consumed.trained_at_of.end()) {
        EXPECT_EQ(at->second, std::set<int64_t>{trained_at}) << when << ": trained_at_version of " << name;
      }
      ASSERT_LT(trained_at, version) << when << ": " << path;
      version = trained_at;
    }
    for (int64_t g : consumed.groups) {
      EXPECT_TRUE(in_weights.count(g)) << when << ": group " << g << " recorded trained, but in no step the weights hold";
    }
    EXPECT_EQ(groups_trained, static_cast<int64_t>(in_weights.size())) << when << ": the trainer's count";
    ++checks_;
  }

  // The job's trainer (its child running flashroll.trainers), or -1.
  pid_t TrainerPid() {
    const auto deadline = Clock::now() + std::chrono::minutes(1);
    while (Clock::now() < deadline) {
      for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string pid = entry.path().filename().string();
        if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string stat = ReadAll("/proc/" + pid + "/stat");
        const size_t paren = stat.rfind(')');
        if (paren == std::string::npos) continue;
        std::istringstream rest(stat.substr(paren + 2));
        char state = 0;
        pid_t ppid = 0;
        rest >> state >> ppid;
        if (ppid != job_ || state == 'Z') continue;
        if (ReadAll("/proc/" + pid + "/cmdline").find("flashroll.trainers") != std::string::npos) {
          return static_cast<pid_t>(std::stoi(pid));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  static void WaitGone(pid_t pid) {
    for (int i = 0; i < 1500 && kill(pid, 0) == 0; ++i) {
      const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
      const size_t paren = stat.rfind(')');
      if (paren != std::string::npos && stat.size() > paren + 2 && stat[paren + 2] == 'Z') return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The trainer's hook holds it between an ack and the publish: returns its
  // pid (the hold is lifted once the caller has killed what it kills).
  pid_t HoldInTheWindow(std::string* stage) {
    std::ofstream(hold_dir_ + "/hold") << "";
    const auto deadline = Clock::now() + std::chrono::minutes(2);
    std::string held;
    while ((held = ReadAll(hold_dir_ + "/held")).empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::istringstream fields(held);
    pid_t pid = -1;
    int step = 0;
    fields >> pid >> step >> *stage;
    return pid;
  }
  void LiftHold() {
    std::filesystem::remove(hold_dir_ + "/hold");
    std::filesystem::remove(hold_dir_ + "/held");
  }

  std::string dir_, hold_dir_;
  pid_t job_ = -1;
  int checks_ = 0;
};

TEST_F(TrainingJobCrashTest, EveryGroupIsTrainedExactlyOnceIntoTheWeightsAcrossKillsOfTheJobAndTheTrainer) {
  const int kills_each = testing_support::FastOrSlow(2, 22);
  const std::string config = WriteConfig();
  StartJob({config});
  std::mt19937 rng(21);
  int job_kills = 0, trainer_kills = 0, forced = 0;
  int64_t published = WaitForPublishedAbove(0);
  ASSERT_GE(published, 1) << "no version published in 3 minutes" << ReadAll(dir_ + "/job.log")
                          << ReadAll(dir_ + "/crash-trainer.log");
  for (int trial = 0; trial < 2 * kills_each; ++trial) {
    const bool kill_job = trial % 2 == 0;
    // Trials 1 and 2 of every 4 are forced into the window: a trainer kill
    // and a job kill, each stage (after the ack; checkpoint written) in turn.
    const bool force = trial % 4 == 1 || trial % 4 == 2;
    const std::string what = "trial " + std::to_string(trial) + (kill_job ? " (job" : " (trainer") +
                             (force ? ", forced)" : ")");
    pid_t trainer = TrainerPid();
    ASSERT_GT(trainer, 0) << what << ": no trainer" << ReadAll(dir_ + "/crash-trainer.log");
    std::string stage = "random";
    if (force) {
      const pid_t held = HoldInTheWindow(&stage);
      ASSERT_EQ(held, trainer) << what << ": the trainer did not reach the hook" << ReadAll(dir_ + "/crash-trainer.log");
      ++forced;
    } else {
      // Anywhere in a step: polling, computing, acking, writing, publishing.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 2500)(rng)));
    }
    const int64_t before = ReadConsumed().published;
    if (kill_job) {
      ASSERT_EQ(kill(job_, SIGKILL), 0);
      waitpid(job_, nullptr, 0);
      job_ = -1;
      WaitGone(trainer);  // it dies with the job (SIGTERM from PR_SET_PDEATHSIG)
      LiftHold();
      StartJob({"--resume", "crash", "--store", dir_ + "/store.db"});
      ++job_kills;
    } else {
      ASSERT_EQ(kill(trainer, SIGKILL), 0);
      WaitGone(trainer);
      LiftHold();
      ++trainer_kills;
    }
    published = WaitForPublishedAbove(before);
    ASSERT_GT(published, before) << what << ": nothing published after the kill" << ReadAll(dir_ + "/job.log")
                                 << ReadAll(dir_ + "/crash-trainer.log");
    ExpectConsumedMatchesTheWeights(what + " at " + stage);
    if (HasFailure()) return;
  }
  // Stopped (SIGTERM pauses the job), the final weights hold each consumed
  // group once.
  ASSERT_EQ(kill(job_, SIGTERM), 0);
  int wstatus = 0;
  waitpid(job_, &wstatus, 0);
  job_ = -1;
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 130) << ReadAll(dir_ + "/job.log");
  ExpectConsumedMatchesTheWeights("after the last kill");
  EXPECT_EQ(job_kills, kills_each);
  EXPECT_EQ(trainer_kills, kills_each);
  EXPECT_GE(forced, kills_each);
  EXPECT_GE(ReadConsumed().groups.size(), static_cast<size_t>(2 * kills_each)) << "training went on between kills";
  std::printf("%d job kills, %d trainer kills (%d forced into the window), %d checks, %zu groups trained, version %lld\n",
              job_kills, trainer_kills, forced, checks_, ReadConsumed().groups.size(),
              static_cast<long long>(ReadConsumed().published));
}

}  // namespace
}  // namespace flashroll
