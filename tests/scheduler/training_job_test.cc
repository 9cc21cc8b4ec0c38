// The RL job with a trainer: the real Python GRPO trainer through the CLI
// (weights published, loaded and served; evaluation before and after), a
// trainer that keeps dying, and a test-double trainer (a short Python
// script named as such) that publishes weights the job must refuse.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fcntl.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/store.h"
#include "scheduler/job_config.h"
#include "scheduler/rl_job.h"
#include "scheduler/trajectory.h"
#include "tests/scheduler/job_process_util.h"

namespace flashroll {
namespace {

using scheduler_test::ReadAll;

class TrainingJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/training_job_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    std::ofstream(dir_ + "/token") << "training-job-test-token\n";
    ::chmod((dir_ + "/token").c_str(), 0600);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteConfig(const std::string& name, const std::string& training) {
    const std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "kind: rl_job\nname: " << name << "\nstore: " << dir_ << "/store.db\n"
                        << "model: {path: models/default, threads: 2}\n"
                        << "tasks: {families: [arithmetic], count: 4, seed: 5}\n"
                        << "rollout: {max_turns: 3, max_tokens: 384, efforts: [100]}\n"
                        << "scheduler: {group_size: 2, max_in_flight: 4, max_per_task: 4, batch_groups: 1}\n"
                        << "training:\n" << training
                        << "trainer_api: {listen: '127.0.0.1:0', token_file: " << dir_ << "/token, lease_timeout: 60s}\n";
    return path;
  }

  JobConfig Load(const std::string& path) {
    auto file = LoadYamlFile(path);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    auto config = ParseJobConfig(*file);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    return *config;
  }

  std::string dir_;
};

// The whole closed loop through the CLI, as `make run` starts it.
TEST_F(TrainingJobTest, ThePythonTrainerTrainsAndTheEngineServesItsWeights) {
  const std::string config = WriteConfig("loop", "  steps: 1\n  learning_rate: 0.0001\n  eval_tasks: 1\n");
  const std::string out = dir_ + "/out.txt";
  const std::string command = std::string(FLASHROLL_BIN) + " run " + config + " > " + out + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << ReadAll(out) << ReadAll(dir_ + "/loop-trainer.log");
  const std::string output = ReadAll(out);
  EXPECT_NE(output.find("completed"), std::string::npos) << output;
  EXPECT_NE(output.find("training: weight version 1, trainer restarts 0"), std::string::npos) << output;
  EXPECT_NE(output.find("fixed evaluation set"), std::string::npos) << output;
  EXPECT_NE(output.find("report: " + dir_ + "/loop-report.html"), std::string::npos) << output;
  EXPECT_NE(ReadAll(dir_ + "/loop-report.html").find("<svg"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/loop-checkpoints/v000001/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/loop-checkpoints/v000001/config.json"));
  const nlohmann::json step = nlohmann::json::parse(ReadAll(dir_ + "/loop-trainer.jsonl"));
  EXPECT_EQ(step["step"], 1);
  EXPECT_EQ(step["version"], 1);
  const nlohmann::json eval = nlohmann::json::parse(ReadAll(dir_ + "/loop-eval.json"));
  EXPECT_EQ(eval["before"]["weight_version"], 0);
  EXPECT_EQ(eval["after"]["weight_version"], 1) << "the evaluation after runs on the published weights";
  EXPECT_EQ(eval["after"]["total"]["episodes"], 1);
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  auto stmt = (*db)->Prepare("SELECT status FROM jobs");
  ASSERT_TRUE(stmt.ok());
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnText(0), "completed");

  // Resumed, the job starts on the last published weights, and the trainer
  // (at its last step already) publishes nothing lower.
  const std::string resume = std::string(FLASHROLL_BIN) + " run " + config + " --resume loop > " + out + " 2>&1";
  ASSERT_EQ(std::system(resume.c_str()), 0) << ReadAll(out);
  EXPECT_NE(ReadAll(out).find("training: weight version 1, trainer restarts 0"), std::string::npos) << ReadAll(out);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/loop-checkpoints/v000002"));
}

TEST_F(TrainingJobTest, ATrainerThatKeepsDyingFailsTheJobAfterItsRestarts) {
  // The trainer's OpenMP threads wait passively (rl_job.cc, TrainerEnvironment).
  const JobConfig config =
      Load(WriteConfig("dying", "  command: [/bin/sh, -c, 'echo dying $OMP_WAIT_POLICY; exit 3', sh]\n  restarts: 1\n"));
  std::vector<std::string> lines;
  RlJobOptions options;
  options.on_status = [&](const std::string& line) { lines.push_back(line); };
  auto summary = RunRlJob(config, options);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message(),
            "trainer exited with status 3 after 1 restarts (log: " + dir_ + "/dying-trainer.log)");
  EXPECT_EQ(ReadAll(dir_ + "/dying-trainer.log"), "dying PASSIVE\ndying PASSIVE\n");
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  auto stmt = (*db)->Prepare("SELECT status FROM jobs");
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnText(0), "failed");
}

// The rollouts are done and the trainer (a test double that never ends)
// still runs: SIGTERM stops the trainer and the job at once.
TEST_F(TrainingJobTest, SigtermWhileTheTrainerRunsOnEndsTheJobPromptly) {
  const std::string config = WriteConfig("sleepy", "  command: [/bin/sh, -c, 'exec sleep 60', trainer]\n");
  const pid_t child = scheduler_test::StartRunQuietly(config);
  ASSERT_GE(child, 0);
  // Wait until the samples the staleness bound lets run without a trainer
  // consuming have finished: (max_staleness 1 + 1) x batch_groups 1 groups of 2.
  const int64_t finished =
      scheduler_test::WaitForSamples(dir_ + "/store.db", "status IN ('completed', 'failed')", 4);
  EXPECT_EQ(finished, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the workers wait on the bound
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(child, SIGTERM), 0);
  int wstatus = 0;
  pid_t done = 0;
  while ((done = waitpid(child, &wstatus, WNOHANG)) == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &wstatus, 0);
    FAIL() << "the job ignored SIGTERM for 20 s";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 130) << "a stopped job is paused (130, as after Ctrl-C), not failed";
}

// What the trainer doubles below share, written ahead of each one's own
// script by WriteTrainerDouble: the flags the job passes, call() (the
// answer's JSON, None for an empty 204 answer, an HTTPError for an error),
// write_checkpoint() (a copy of the model as checkpoint <name>),
// write_other_checkpoint() (other weights of the model's shapes) and
// train_until_quiet().
constexpr char kTrainerDoublePreamble[] = R"PY(
import json, os, shutil, sys, time, urllib.error, urllib.request
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
root, token = args["--checkpoint-root"], open(args["--token-file"]).read().strip()
here = os.path.dirname(root)
def call(path, body=None):
    req = urllib.request.Request(args["--api"] + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r) if r.status == 200 else None
def write_checkpoint(name):
    os.makedirs(os.path.join(root, name))
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(args["--model"], f), os.path.join(root, name))
def write_other_checkpoint(name):
    # Other weights of the same shapes: layers 0 and 1 exchanged.
    write_checkpoint(name)
    path = os.path.join(root, name, "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header, data = json.loads(f.read(n)), f.read()
    for tensor in [t for t in header if t.startswith("model.layers.0.")]:
        other = "model.layers.1." + tensor[len("model.layers.0."):]
        header[tensor]["data_offsets"], header[other]["data_offsets"] = header[other]["data_offsets"], header[tensor]["data_offsets"]
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded + data)
def train_until_quiet(name, trainer_version, quiet_s):
    # Leases and acks what the job serves, writing each group id to `name`,
    # until nothing comes for quiet_s or the queue closes (409).
    with open(os.path.join(here, name), "w") as out:
        while True:
            try:
                batch = call("/v1/batches?min_groups=1&timeout=%g&trainer_version=%d" % (quiet_s, trainer_version))
            except urllib.error.HTTPError:
                break  # 409: the queue closed
            if batch is None:
                break
            out.write("".join("%d\n" % g["group_id"] for g in batch["groups"]))
            out.flush()
            call("/v1/batches/%s/ack" % batch["lease"], {})
)PY";

void WriteTrainerDouble(const std::string& path, const char* script) {
  std::ofstream(path) << kTrainerDoublePreamble << script;
}

// A test double of a trainer: publishes other weights (layers 0 and 1 of
// the model exchanged) as version 1 as soon as some sample started and not
// finished has sampled tokens
// (however late Python starts on a loaded machine): tokens generated
// between two polls with samples in flight and none finished belong to a
// sample still running. Then it takes every group as it finishes and exits 0
// once all have. Taking groups opens more of them; leasing never blocks, so
// the double does not sleep through the samples it waits for.
constexpr char kEarlyWeightsTrainer[] = R"PY(
write_other_checkpoint("v000001")
published, last = False, None
while True:
    status = call("/v1/status")
    running = status["samples_in_flight"] > 0
    if (not published and running and last is not None and status["samples_done"] == last["samples_done"]
            and status["tokens_generated"] > last["tokens_generated"]):
        call("/v1/weights", {"path": "v000001", "version": 1})
        published = True
    last = status if running else None
    if status["groups_done"] == status["groups_total"]:
        break
    batch = call("/v1/batches?timeout=0")
    if batch is None:
        time.sleep(0.02)
    else:
        call("/v1/batches/%s/ack" % batch["lease"], {})
)PY";

TEST_F(TrainingJobTest, SamplesRunningAtASwapContinueOnTheNewWeightsWithoutRestarting) {
  WriteTrainerDouble(dir_ + "/early.py", kEarlyWeightsTrainer);
  const JobConfig config = Load(WriteConfig("early", "  command: [/usr/bin/python3, " + dir_ + "/early.py]\n  restarts: 0\n"));
  auto summary = RunRlJob(config, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << ReadAll(dir_ + "/early-trainer.log");
  EXPECT_EQ(summary->weight_version, 1);
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  int spanning = 0, on_new = 0;
  for (int64_t group = 1; group <= summary->groups_total; ++group) {
    auto samples = LoadGroupSamples(**db, summary->job_id, group);
    ASSERT_TRUE(samples.ok()) << samples.status().ToString();
    for (const StoredSample& s : *samples) {
      std::set<int32_t> versions;
      for (int32_t v : s.sample.versions) {
        if (v >= 0) versions.insert(v);
      }
      spanning += versions.count(0) && versions.count(1);
      on_new += versions.count(1);
      // Version 0's tokens all come before version 1's: the swap happened once, between two tokens.
      bool seen_new = false;
      for (int32_t v : s.sample.versions) {
        if (v == 1) seen_new = true;
        if (seen_new) {
          EXPECT_NE(v, 0) << "sample " << s.sample.sample_id;
        }
      }
    }
  }
  EXPECT_GT(spanning, 0) << "a sample generating at the swap carries tokens of both versions";
  EXPECT_GT(on_new, 0);
  // Each episode is one engine session: its later turns computed only the
  // tool's tokens, on the new weights too, and nothing was computed twice.
  EXPECT_GT(summary->prefill_tokens, 0);
  EXPECT_EQ(summary->reprefill_tokens, 0);
  EXPECT_GT(summary->trained_tokens, 0);
}

// A test double of a trainer: lets the two groups the staleness gate opens
// without a trainer finish (every token sampled by version 0, and masked 1
// when its sample finished), publishes versions 1 and 2 (copies of the
// model), then leases them as a trainer holding version 2, writes, per
// sample, its sampled tokens and how many the served mask keeps, acks (twice)
// and publishes version 3, the update that trained them.
constexpr char kLateTrainer[] = R"PY(
while call("/v1/status")["groups_done"] < 2:
    time.sleep(0.1)
for version in (1, 2):
    name = "v%06d" % version
    write_checkpoint(name)
    call("/v1/weights", {"path": name, "version": version})
    # One swap at a time: the next is posted once this one is served.
    while call("/v1/status")["weight_version"] < version:
        time.sleep(0.1)
batch = call("/v1/batches?min_groups=2&timeout=30&trainer_version=2")
with open(os.path.join(here, "masks.txt"), "w") as out:
    for g in batch["groups"]:
        for s in g["samples"]:
            out.write("%d %d %d\n" % (max(s["versions"]), sum(v >= 0 for v in s["versions"]), sum(s["loss_mask"])))
call("/v1/batches/%s/ack" % batch["lease"], {})
call("/v1/batches/%s/ack" % batch["lease"], {})  # a retried ack changes nothing
name = "v000003"  # the update of that step, durable: the samples are recorded trained at version 2
write_checkpoint(name)
call("/v1/weights", {"path": name, "version": 3})
)PY";

// Staleness is bounded when a token is trained, not when its sample
// finished: version 0's tokens, fresh when their samples finished, are two
// versions older than the trainer that leases them (max_staleness 1).
TEST_F(TrainingJobTest, TokensTooStaleForTheLeasingTrainersVersionAreMasked) {
  WriteTrainerDouble(dir_ + "/late.py", kLateTrainer);
  const JobConfig config = Load(WriteConfig("late", "  command: [/usr/bin/python3, " + dir_ + "/late.py]\n  restarts: 0\n"));
  auto summary = RunRlJob(config, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << ReadAll(dir_ + "/late-trainer.log");
  EXPECT_EQ(summary->weight_version, 3);
  std::istringstream masks(ReadAll(dir_ + "/masks.txt"));
  int samples = 0;
  for (int max_version = 0, sampled = 0, kept = 0; masks >> max_version >> sampled >> kept; ++samples) {
    EXPECT_EQ(max_version, 0) << "sample " << samples;
    EXPECT_GT(sampled, 0) << "sample " << samples;
    EXPECT_EQ(kept, 0) << "sample " << samples << ": " << sampled << " tokens of version 0 trained by version 2";
  }
  EXPECT_EQ(samples, 4) << ReadAll(dir_ + "/late-trainer.log");
  // Version 3 made that step durable: the store records the samples trained
  // at version 2 with the mask the step trained with (the export shows both).
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  int trained = 0;
  for (int64_t group : {1, 2}) {
    auto stored = LoadGroupSamples(**db, summary->job_id, group);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    for (const StoredSample& s : *stored) {
      ++trained;
      EXPECT_EQ(s.trained_at_version, 2) << "sample " << s.sample.sample_id;
      EXPECT_EQ(std::count(s.sample.loss_mask.begin(), s.sample.loss_mask.end(), 1), 0) << "sample " << s.sample.sample_id;
    }
  }
  EXPECT_EQ(trained, 4);
  auto untrained = (*db)->Prepare("SELECT count(*) FROM samples WHERE group_id > 2 AND trained_at_version IS NOT NULL");
  ASSERT_TRUE(untrained.ok());
  ASSERT_TRUE(*untrained->Step());
  EXPECT_EQ(untrained->ColumnInt64(0), 0) << "groups never consumed have no trained_at_version";
  auto versions = (*db)->Prepare("SELECT group_concat(version) FROM (SELECT version FROM weight_versions ORDER BY version)");
  ASSERT_TRUE(versions.ok());
  ASSERT_TRUE(*versions->Step());
  EXPECT_EQ(versions->ColumnText(0), "1,2,3") << "each published version is recorded";
}

// A test double of a trainer. First run: leases two groups holding version
// 0, acks them, publishes version 1 (a copy of the model: the checkpoint of
// that step) and exits, which ends the job. Resumed: leases whatever the job
// serves for a while, writing each group id, and exits.
constexpr char kResumingTrainer[] = R"PY(
first = not os.path.exists(os.path.join(here, "first.txt"))
if first:
    batch = call("/v1/batches?min_groups=2&max_groups=2&timeout=60&trainer_version=0")
    call("/v1/batches/%s/ack" % batch["lease"], {})
    write_checkpoint("v000001")
    call("/v1/weights", {"path": "v000001", "version": 1})
    with open(os.path.join(here, "first.txt"), "w") as out:
        out.write("".join("%d\n" % g["group_id"] for g in batch["groups"]))
    sys.exit(0)
train_until_quiet("second.txt", trainer_version=1, quiet_s=20)
)PY";

// The groups a published checkpoint holds (acked at version 0, then version
// 1 published) are recorded trained, and a resumed job does not serve them
// again; the old job queued every finished group again on --resume.
TEST_F(TrainingJobTest, AResumedJobDoesNotServeAgainTheGroupsAPublishedCheckpointHolds) {
  WriteTrainerDouble(dir_ + "/resuming.py", kResumingTrainer);
  const JobConfig config =
      Load(WriteConfig("resuming", "  command: [/usr/bin/python3, " + dir_ + "/resuming.py]\n  restarts: 0\n"));
  auto first = RunRlJob(config, {});
  ASSERT_TRUE(first.ok()) << first.status().ToString() << ReadAll(dir_ + "/resuming-trainer.log");
  std::set<int64_t> trained;
  {
    std::istringstream ids(ReadAll(dir_ + "/first.txt"));
    for (int64_t id = 0; ids >> id;) trained.insert(id);
  }
  ASSERT_EQ(trained.size(), 2u) << ReadAll(dir_ + "/resuming-trainer.log");
  {
    auto db = store::OpenStore(dir_ + "/store.db");
    ASSERT_TRUE(db.ok());
    auto stmt = (*db)->Prepare("SELECT count(DISTINCT group_id) FROM samples WHERE trained_at_version = 0");
    ASSERT_TRUE(stmt.ok());
    ASSERT_TRUE(*stmt->Step());
    EXPECT_EQ(stmt->ColumnInt64(0), 2) << "both leased groups are recorded trained at version 0";
  }
  RlJobOptions options;
  options.resume = "resuming";
  auto resumed = RunRlJob(config, options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString() << ReadAll(dir_ + "/resuming-trainer.log");
  std::istringstream served(ReadAll(dir_ + "/second.txt"));
  int n = 0;
  for (int64_t id = 0; served >> id; ++n) EXPECT_EQ(trained.count(id), 0u) << "group " << id << " served again";
  EXPECT_GT(n, 0) << "the resumed job served the groups not trained yet";
}

// A test double of a trainer. First start: leases two groups holding
// version 0, acks them (into version 1), writes their ids and dies (exit 1)
// before any checkpoint holds them. Restarted by the job: leases what the
// job serves until nothing comes for 3 s or the queue closes, writing each
// group id, acks it, then publishes version 1 (a copy of the model) and exits 0.
constexpr char kDyingAfterAckTrainer[] = R"PY(
if not os.path.exists(os.path.join(here, "first.txt")):
    batch = call("/v1/batches?min_groups=2&max_groups=2&timeout=60&trainer_version=0")
    call("/v1/batches/%s/ack" % batch["lease"], {"trained_at_version": 0, "into_version": 1})
    with open(os.path.join(here, "first.txt"), "w") as out:
        out.write("".join("%d\n" % g["group_id"] for g in batch["groups"]))
    sys.exit(1)
train_until_quiet("second.txt", trainer_version=0, quiet_s=3)
write_checkpoint("v000001")
call("/v1/weights", {"path": "v000001", "version": 1})
)PY";

std::set<int64_t> ReadIds(const std::string& path) {
  std::set<int64_t> ids;
  std::istringstream in(ReadAll(path));
  for (int64_t id = 0; in >> id;) ids.insert(id);
  return ids;
}

// A trainer that dies between an ack and the publish of the checkpoint
// holding that update: its successor resumes without it, so the job serves
// those groups again (the old job counted them consumed for good: lost).
TEST_F(TrainingJobTest, AGroupAckedByATrainerThatDiedBeforeItsCheckpointIsServedAgain) {
  WriteTrainerDouble(dir_ + "/dying.py", kDyingAfterAckTrainer);
  const JobConfig config =
      Load(WriteConfig("dying", "  command: [/usr/bin/python3, " + dir_ + "/dying.py]\n  restarts: 1\n"));
  auto summary = RunRlJob(config, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << ReadAll(dir_ + "/dying-trainer.log");
  EXPECT_EQ(summary->trainer_restarts, 1);
  const std::set<int64_t> first = ReadIds(dir_ + "/first.txt"), second = ReadIds(dir_ + "/second.txt");
  ASSERT_EQ(first.size(), 2u) << ReadAll(dir_ + "/dying-trainer.log");
  for (int64_t group : first) EXPECT_EQ(second.count(group), 1u) << "group " << group << " lost with the dead trainer";
  // Version 1 holds what the second trainer acked: exactly those groups are recorded trained.
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  auto stmt = (*db)->Prepare("SELECT DISTINCT group_id FROM samples WHERE trained_at_version = 0");
  ASSERT_TRUE(stmt.ok());
  std::set<int64_t> trained;
  while (*stmt->Step()) trained.insert(stmt->ColumnInt64(0));
  EXPECT_EQ(trained, second);
}

// A test double of a trainer. First run: leases two groups, acks them,
// writes checkpoint v000001 but never publishes it, marks that in
// written.txt and waits to be killed with the job. Resumed: writes what GET
// /v1/weights says, leases what the job serves until nothing comes for 3 s
// or the queue closes, writing each group id, and exits 0.
constexpr char kUnpublishedCheckpointTrainer[] = R"PY(
if not os.path.exists(os.path.join(here, "first.txt")):
    batch = call("/v1/batches?min_groups=2&max_groups=2&timeout=60&trainer_version=0")
    call("/v1/batches/%s/ack" % batch["lease"], {})
    with open(os.path.join(here, "first.txt"), "w") as out:
        out.write("".join("%d\n" % g["group_id"] for g in batch["groups"]))
    write_checkpoint("v000001")
    open(os.path.join(here, "written.txt"), "w").close()
    time.sleep(600)
try:
    weights = call("/v1/weights")
except urllib.error.HTTPError as e:
    weights = {"error": e.code}
with open(os.path.join(here, "weights.json"), "w") as out:
    json.dump(weights, out)
train_until_quiet("second.txt", trainer_version=0, quiet_s=3)
)PY";

// The job is killed after an ack whose checkpoint was written but never
// published: resumed, it serves on the last published weights (here the
// initial ones), tells the trainer so and to number above the checkpoint
// on disk, and serves those groups again. The old job resumed on the
// highest checkpoint on disk, unpublished, whose groups it served again.
TEST_F(TrainingJobTest, AJobKilledBeforeAWrittenCheckpointWasPublishedResumesOnThePublishedWeights) {
  WriteTrainerDouble(dir_ + "/unpublished.py", kUnpublishedCheckpointTrainer);
  const std::string config_path =
      WriteConfig("unpublished", "  command: [/usr/bin/python3, " + dir_ + "/unpublished.py]\n  restarts: 0\n");
  const pid_t child = scheduler_test::StartRunQuietly(config_path);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 2400 && !std::filesystem::exists(dir_ + "/written.txt"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/written.txt")) << ReadAll(dir_ + "/unpublished-trainer.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the orphaned trainer got SIGTERM
  RlJobOptions options;
  options.resume = "unpublished";
  auto resumed = RunRlJob(Load(config_path), options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString() << ReadAll(dir_ + "/unpublished-trainer.log");
  EXPECT_EQ(resumed->weight_version, 0) << "v000001 was never published";
  const nlohmann::json weights = nlohmann::json::parse(ReadAll(dir_ + "/weights.json"));
  EXPECT_EQ(weights, nlohmann::json::parse(R"({"version": 0, "path": null, "next_version": 2})")) << weights.dump();
  const std::set<int64_t> first = ReadIds(dir_ + "/first.txt"), second = ReadIds(dir_ + "/second.txt");
  ASSERT_EQ(first.size(), 2u);
  for (int64_t group : first) EXPECT_EQ(second.count(group), 1u) << "group " << group << " not served again";
}

// A test double of a trainer that trains nothing: it polls until the queue
// closes (409), then exits 0.
constexpr char kDrainingTrainer[] = R"PY(
import json, sys, urllib.error, urllib.request
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
token = open(args["--token-file"]).read().strip()
while True:
    req = urllib.request.Request(args["--api"] + "/v1/batches?min_groups=1&timeout=1",
                                 headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            if r.status == 200:
                lease = json.load(r)["lease"]
                ack = urllib.request.Request(args["--api"] + "/v1/batches/%s/ack" % lease, data=b"{}",
                                             headers={"Authorization": "Bearer " + token})
                urllib.request.urlopen(ack, timeout=60).read()
    except urllib.error.HTTPError as e:
        if e.code == 409:
            sys.exit(0)
        raise
)PY";

// `extra` goes into the config's scheduler map; `rewards` is a line of its own.
std::string WithScheduler(const std::string& path, const std::string& extra, const std::string& rewards) {
  std::string text = ReadAll(path);
  const std::string key = "batch_groups: 1}";
  text.replace(text.find(key), key.size(), "batch_groups: 1, " + extra + "}");
  std::ofstream(path) << text << rewards;
  return path;
}

// With rewards.failed: exclude a group whose samples all failed is never
// queued, so never consumed: the staleness gate counted it open for good
// once (max_staleness 1 + 1) x batch_groups 1 = 2 such groups finished, and
// the job stalled at 2 of 4 groups. It counts them as unqueued instead.
TEST_F(TrainingJobTest, GroupsWithNothingToTrainOnDoNotCloseTheStalenessGate) {
  std::ofstream(dir_ + "/drain.py") << kDrainingTrainer;
  const JobConfig config = Load(WithScheduler(
      WriteConfig("unqueued", "  command: [/usr/bin/python3, " + dir_ + "/drain.py]\n  restarts: 0\n"),
      "sample_timeout: 1ms", "rewards: {failed: exclude}\n"));
  RlJobOptions options;
  std::vector<std::string> lines;
  options.status_interval = std::chrono::milliseconds(10);
  options.on_status = [&](const std::string& line) { lines.push_back(line); };
  auto summary = RunRlJob(config, options);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << ReadAll(dir_ + "/unqueued-trainer.log");
  EXPECT_EQ(summary->groups_done, 4);
  EXPECT_EQ(summary->groups_unqueued, 4);
  EXPECT_EQ(summary->ToJson()["groups_unqueued"], 4);
  // A training job ends at its trainer's last step (training.steps 4), not
  // after its planned groups: the status line says both, not "groups 2/4".
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find(" (4 planned)  reward"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("  step 0/4"), std::string::npos) << lines.back();
}

// A trainer double that leases two groups at a time and writes each lease's
// groups' verdicts, one JSON line per lease, to the file named by its first
// argument; it acks and goes on until the queue closes.
constexpr char kRecordingTrainer[] = R"PY(
import json, sys, urllib.error, urllib.request
out = sys.argv[1]
args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
token = open(args["--token-file"]).read().strip()
while True:
    req = urllib.request.Request(args["--api"] + "/v1/batches?min_groups=2&max_groups=2&timeout=1",
                                 headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            if r.status == 200:
                batch = json.load(r)
                with open(out, "a") as f:
                    f.write(json.dumps([[s["success"] for s in g["samples"]] for g in batch["groups"]]) + "\n")
                ack = urllib.request.Request(args["--api"] + "/v1/batches/%s/ack" % batch["lease"], data=b"{}",
                                             headers={"Authorization": "Bearer " + token})
                urllib.request.urlopen(ack, timeout=60).read()
    except urllib.error.HTTPError as e:
        if e.code == 409:
            sys.exit(0)
        raise
)PY";

// Dynamic sampling (scheduler.dynamic_sampling: verifier): a group whose
// verdicts all agree never reaches the trainer, and the staleness gate
// counts it consumed so other groups open in its place and batches still
// fill. Three tasks every sample passes (a check that exits 0) and three
// whose verdict is the parity of the answer's length (their groups split or
// not as the samples fall), at two efforts.
TEST_F(TrainingJobTest, DynamicSamplingNeverServesAGroupWhoseVerdictsAgreeAndStillFillsBatches) {
  std::ofstream tasks(dir_ + "/tasks.jsonl");
  for (int i = 0; i < 3; ++i) {
    tasks << R"({"id": "pass-)" << i << R"(", "prompt": "Say a word.", "verifier": {"kind": "python", "script": "import sys\nsys.exit(0)\n"}})" << "\n"
          << R"({"id": "parity-)" << i << R"(", "prompt": "Say a few words.", "verifier": {"kind": "python", "script": "import sys\nsys.exit(len(sys.stdin.read().strip()) % 2)\n"}})" << "\n";
  }
  tasks.close();
  std::ofstream(dir_ + "/record.py") << kRecordingTrainer;
  const std::string path = dir_ + "/dynamic.yaml";
  std::ofstream(path) << "kind: rl_job\nname: dynamic\nstore: " << dir_ << "/store.db\n"
                      << "model: {path: models/default, threads: 2}\n"
                      << "tasks: {files: [" << dir_ << "/tasks.jsonl]}\n"
                      << "rollout: {max_turns: 2, max_tokens: 256, temperature: 1.4, efforts: [1, 100]}\n"
                      << "scheduler: {group_size: 2, max_in_flight: 4, max_per_task: 4, batch_groups: 2, "
                      << "dynamic_sampling: verifier, stall_timeout: 2m}\n"
                      << "training:\n  command: [/usr/bin/python3, " << dir_ << "/record.py, " << dir_ << "/leases.jsonl]\n"
                      << "  restarts: 0\n"
                      << "trainer_api: {listen: '127.0.0.1:0', token_file: " << dir_ << "/token, lease_timeout: 60s}\n";
  auto summary = RunRlJob(Load(path), {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << ReadAll(dir_ + "/dynamic-trainer.log");
  EXPECT_EQ(summary->groups_done, 12);
  EXPECT_GE(summary->groups_skipped_zero_variance, 6) << "every group of the always-passing tasks";
  EXPECT_EQ(summary->ToJson()["groups_skipped_zero_variance"], summary->groups_skipped_zero_variance);
  std::ifstream in(dir_ + "/leases.jsonl");
  int64_t served = 0, leases = 0, short_leases = 0;
  for (std::string line; std::getline(in, line);) {
    const auto groups = nlohmann::json::parse(line);
    ++leases;
    if (groups.size() < 2) ++short_leases;
    for (const auto& verdicts : groups) {
      ++served;
      const std::set<bool> seen(verdicts.begin(), verdicts.end());
      EXPECT_EQ(seen.size(), 2u) << "a group whose verdicts agree was served: " << verdicts.dump();
    }
  }
  EXPECT_EQ(served + summary->groups_skipped_zero_variance, summary->groups_done) << "no group lost";
  EXPECT_LE(short_leases, 1) << "only the last lease, drained after the queue closed, may be short";
}

// --evaluate-only (make run-controls): no sample and no trainer, the fixed
// evaluation at each of training.eval_temperatures on model.path, and with
// evaluate_weights on that checkpoint too (here the default model's weights
// copied beneath the checkpoint root).
TEST_F(TrainingJobTest, EvaluateOnlyRunsTheEvaluationAtEachTemperatureAndOnTheGivenWeights) {
  const std::string checkpoints = dir_ + "/checkpoints";
  std::filesystem::create_directories(checkpoints + "/v000007");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    std::filesystem::copy_file(std::string("models/default/") + f, checkpoints + "/v000007/" + f);
  }
  const JobConfig config = Load(WriteConfig(
      "controls", "  eval_tasks: 2\n  test_seed: 11\n  test_tasks: 3\n  eval_temperatures: [1.0, 0]\n  checkpoint_dir: " +
                      checkpoints + "\n"));
  RlJobOptions options;
  options.evaluate_only = true;
  options.evaluate_weights = checkpoints + "/v000007";
  auto summary = RunRlJob(config, options);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->samples_done, 0);
  EXPECT_EQ(summary->weight_version, 1) << "the given weights were swapped in";
  for (const char* side : {"before", "after"}) {
    const Json& report = summary->eval[side];
    EXPECT_EQ(report["temperature"], 1.0) << side;
    EXPECT_EQ(report["total"]["episodes"], 2) << side;
    ASSERT_TRUE(report.contains("at_temperature_0")) << side << ": " << report.dump();
    EXPECT_EQ(report["at_temperature_0"]["total"]["episodes"], 2) << side;
    // The held-out set has training.test_tasks tasks, not eval_tasks.
    EXPECT_EQ(report["test"]["total"]["episodes"], 3) << side;
    EXPECT_EQ(report["test"]["at_temperature_0"]["total"]["episodes"], 3) << side;
  }
  // Paired by episode: the same tasks at the same indices on both sides.
  const Json& before = summary->eval["before"]["at_temperature_0"]["episodes"];
  const Json& after = summary->eval["after"]["at_temperature_0"]["episodes"];
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(before[i]["task"], after[i]["task"]) << i;
  EXPECT_NE(summary->ToText().find("greedy (T = 0):"), std::string::npos) << summary->ToText();
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  auto count = (*db)->Prepare("SELECT count(*) FROM samples");
  ASSERT_TRUE(count.ok());
  ASSERT_TRUE(*count->Step());
  EXPECT_EQ(count->ColumnInt64(0), 0);
}

// A trainer that never consumes (a test double that sleeps) closes the
// staleness gate: with nothing moving for scheduler.stall_timeout the job
// fails, naming the gate's arithmetic, instead of waiting silently forever.
TEST_F(TrainingJobTest, AJobThatMakesNoProgressForTheStallTimeoutFailsWithTheReason) {
  const JobConfig config = Load(WithScheduler(
      WriteConfig("stalled", "  command: [/bin/sh, -c, 'exec sleep 60', trainer]\n  restarts: 0\n"),
      // Long enough for two groups to finish under ASan on a loaded machine
      // (at 1500ms the job once stalled before any sample finished, at 4s
      // once at load 20).
      "stall_timeout: 10s", ""));
  const auto start = std::chrono::steady_clock::now();
  auto summary = RunRlJob(config, {});
  ASSERT_FALSE(summary.ok());
  // The trainer sleeps 60 s: the job must stop it, not wait for it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(55)) << "the sleeping trainer was stopped";
  const std::string message = summary.status().message();
  EXPECT_EQ(summary.status().code(), Code::kDeadlineExceeded) << message;
  EXPECT_NE(message.find("stalled: no sample finished, no token generated, no group consumed and no weights"
                         " published for 10000 ms (scheduler.stall_timeout)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("2/4 groups finished, 2 opened"), std::string::npos) << message;
  EXPECT_NE(message.find("opened + 1 <= consumed 0 + unqueued 0 + (max_staleness 1 + 1) x batch_groups 1 = 2 (closed"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("trainer queue: 2 queued, 0 leased"), std::string::npos) << message;
  auto db = store::OpenStore(dir_ + "/store.db");
  ASSERT_TRUE(db.ok());
  auto stmt = (*db)->Prepare("SELECT status FROM jobs");
  ASSERT_TRUE(stmt.ok());
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnText(0), "failed");
}

// A test double of a trainer: publishes weights the job must refuse, writes
// each answer's status and message to answers.txt, and exits 0.
constexpr char kRefusedWeightsTrainer[] = R"PY(
import json, os, shutil, sys, urllib.request, urllib.error
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
root, token = args["--checkpoint-root"], open(args["--token-file"]).read().strip()
os.makedirs(os.path.join(root, "v000002"))
cfg = json.load(open(os.path.join(args["--model"], "config.json")))
cfg["hidden_size"] = 128
json.dump(cfg, open(os.path.join(root, "v000002", "config.json"), "w"))
shutil.copy(os.path.join(args["--model"], "model.safetensors"), os.path.join(root, "v000002"))
os.mkfifo(os.path.join(root, "fifo"))
def post(path, version):
    req = urllib.request.Request(args["--api"] + "/v1/weights", data=json.dumps({"path": path, "version": version}).encode(),
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]["message"]
with open(os.path.join(os.path.dirname(root), "answers.txt"), "w") as out:
    for path, version in [("../../etc", 1), ("/etc", 1), ("fifo", 1), ("v000009", 1), ("v000002", 2)]:
        out.write("%s %d %d %s\n" % (path, version, *post(path, version)))
    with urllib.request.urlopen(urllib.request.Request(args["--api"] + "/v1/status", headers={"Authorization": "Bearer " + token})) as r:
        out.write("version %d\n" % json.load(r)["weight_version"])
)PY";

TEST_F(TrainingJobTest, WeightsOutsideTheRootOrUnlikeTheModelAreRefusedAndTheOldOnesServe) {
  std::ofstream(dir_ + "/double.py") << kRefusedWeightsTrainer;
  const JobConfig config = Load(WriteConfig("refused", "  command: [/usr/bin/python3, " + dir_ + "/double.py]\n  restarts: 0\n"));
  auto summary = RunRlJob(config, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->weight_version, 0);
  std::istringstream answers(ReadAll(dir_ + "/answers.txt"));
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(answers, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u) << ReadAll(dir_ + "/answers.txt") << ReadAll(dir_ + "/refused-trainer.log");
  EXPECT_EQ(lines[0].rfind("../../etc 1 403 ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("/etc 1 403 ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("fifo 1 403 ", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("v000009 1 404 ", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4].rfind("v000002 2 400 ", 0), 0u) << lines[4];
  EXPECT_NE(lines[4].find("hidden_size"), std::string::npos) << "the message names the field: " << lines[4];
  EXPECT_EQ(lines[5], "version 0") << "the old weights keep serving";
}

}  // namespace
}  // namespace flashroll
