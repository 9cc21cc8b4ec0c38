#include "rollout/sandbox_workspace.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include <gtest/gtest.h>

#include "tasks/task.h"
#include "tests/rollout/rollout_fixtures.h"

namespace flashroll {
namespace {

using SandboxWorkspaceTest = rollout_testing::SandboxManagerTest;

TEST_F(SandboxWorkspaceTest, FilesAndCommandsMeetInTheWorkDirectory) {
  std::string id;
  {
    auto ws = SandboxWorkspace::Create(*manager_, sandbox::SandboxSpec{});
    ASSERT_TRUE(ws.ok()) << ws.status().ToString();
    id = (*ws)->id();
    ASSERT_TRUE((*ws)->WriteFile("data/in.txt", "3\n4\n").ok());
    auto r = (*ws)->Exec("awk '{s += $1} END {print s}' data/in.txt > out.txt && cat out.txt && pwd",
                         std::chrono::seconds(10));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->exit_code, 0) << r->stderr_text;
    EXPECT_EQ(r->stdout_text, "7\n/tmp/work\n");
    auto out = (*ws)->ReadFile("out.txt");
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, "7\n");
    EXPECT_EQ((*ws)->ReadFile("../etc/passwd").status().code(), Code::kInvalidArgument);
    auto timeout = (*ws)->Exec("sleep 5", std::chrono::milliseconds(200));
    ASSERT_TRUE(timeout.ok());
    EXPECT_EQ(timeout->exit_code, 124);
  }
  // The workspace destroyed its sandbox.
  for (const std::string& live : manager_->List()) EXPECT_NE(live, id);
}

// A task's verifier reads its answer file through the files API: an agent
// that leaves a FIFO there fails the task at once instead of hanging the
// verifier (and, before, every exec and Destroy of the sandbox with it).
TEST_F(SandboxWorkspaceTest, AnAnswerFileThatIsAFifoFailsTheTaskAtOnce) {
  auto ws = SandboxWorkspace::Create(*manager_, sandbox::SandboxSpec{});
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  Task task;
  task.id = "t-1";
  task.answer = "7";
  task.answer_file = "answer.txt";
  ASSERT_EQ((*ws)->Exec("echo 7 > answer.txt", std::chrono::seconds(10))->exit_code, 0);
  EXPECT_TRUE(VerifyTask(task, "", **ws).success);
  ASSERT_EQ((*ws)->Exec("rm answer.txt && mkfifo answer.txt", std::chrono::seconds(10))->exit_code, 0);
  const std::string fifo =
      "/proc/" + std::to_string(manager_->Info((*ws)->id())->init_pid) + "/root/tmp/work/answer.txt";
  auto verdict = std::async(std::launch::async, [&] { return VerifyTask(task, "", **ws); });
  if (verdict.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    ADD_FAILURE() << "the verifier hangs on a FIFO";
    ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));  // a writer ends the reader's wait
  }
  EXPECT_FALSE(verdict.get().success);
}

// ForVerification: the agent's sandbox is gone, processes and all; the copy
// keeps files, modes, nested directories and links (as links, never
// followed), drops FIFOs, and is read without a sandbox until a command runs.
TEST_F(SandboxWorkspaceTest, TheVerificationCopyOutlivesNoAgentProcess) {
  auto ws = SandboxWorkspace::Create(*manager_, sandbox::SandboxSpec{});
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  auto made = (*ws)->Exec(
      "mkdir -p d/e && echo deep > d/e/f && printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod 750 run.sh && "
      "ln -s /etc leak && ln -s d/e/f near && mkfifo pipe && { setsid sleep 1000 >/dev/null 2>&1 < /dev/null & }",
      std::chrono::seconds(10));
  ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->stderr_text : made.status().ToString());
  const std::string agent = (*ws)->id();
  const pid_t init = manager_->Info(agent)->init_pid;
  auto copy = (*ws)->ForVerification();
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(manager_->Info(agent).status().code(), Code::kNotFound);
  EXPECT_NE(::access(("/proc/" + std::to_string(init)).c_str(), F_OK), 0) << "the agent's init outlived ForVerification";
  const size_t sandboxes = manager_->List().size();
  EXPECT_EQ(*(*copy)->ReadFile("d/e/f"), "deep\n");
  EXPECT_FALSE((*copy)->ReadFile("leak/passwd").ok()) << "a link is not followed";
  EXPECT_FALSE((*copy)->ReadFile("near").ok()) << "a link is no regular file";
  EXPECT_EQ(manager_->List().size(), sandboxes) << "reading the copy made a sandbox";
  ASSERT_TRUE((*copy)->WriteFile("d/e/check.txt", "mine\n").ok());
  auto seen = (*copy)->Exec("stat -c %a run.sh; ./run.sh; readlink leak; cat near d/e/check.txt; "
                            "test -e pipe || echo no fifo; pgrep -c sleep || true",
                            std::chrono::seconds(10));
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(seen->stdout_text, "750\nran\n/etc\ndeep\nmine\nno fifo\n0\n") << seen->stderr_text;
}

}  // namespace
}  // namespace flashroll

namespace flashroll {
namespace {

// A task that names its user: the agent's commands run as it, and the
// task's files are the agent's to change (they are written as the
// sandbox's root, then given to the work directory's owner).
TEST_F(SandboxWorkspaceTest, ATaskRunsAsTheUserItsEnvironmentNames) {
  Task task;
  task.id = "as-nobody";
  task.environment.user = "nobody";
  auto spec = TaskSandboxSpec(sandbox::SandboxSpec{}, task);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto ws = SandboxWorkspace::Create(*manager_, *spec);
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ASSERT_TRUE((*ws)->WriteFile("src/main.py", "print(1)\n").ok());
  auto r = (*ws)->Exec("id -un && echo 'print(2)' >> src/main.py && touch src/new && cat src/main.py",
                       std::chrono::seconds(10));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->stderr_text;
  EXPECT_EQ(r->stdout_text, "nobody\nprint(1)\nprint(2)\n");
  // The check runs as the same user, over the copy.
  auto check = (*ws)->ForVerification();
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  ASSERT_TRUE((*check)->WriteFile("test_main.py", "assert True\n").ok());
  auto verdict = (*check)->Exec("id -un && cat src/main.py test_main.py && touch src/cache", std::chrono::seconds(10));
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  EXPECT_EQ(verdict->exit_code, 0) << verdict->stderr_text;
  EXPECT_EQ(verdict->stdout_text, "nobody\nprint(1)\nprint(2)\nassert True\n");
}

TEST(TaskSandboxSpecTest, ATaskAsksWithinTheJobsCeilings) {
  Task task;
  task.id = "t-3";
  TaskCeilings ceilings;
  ceilings.memory_bytes = 1ull << 30;
  ceilings.disk_bytes = 2ull << 30;
  ceilings.pids = 512;
  ceilings.cpus = 2;
  ceilings.allow_rules = 1;
  task.environment.memory_bytes = 1ull << 30;
  task.environment.disk_bytes = 2ull << 30;
  task.environment.pids = 512;
  task.environment.cpus = 2;
  task.environment.net = "policy";
  task.environment.allow = {"10.0.0.7:443"};
  EXPECT_TRUE(TaskSandboxSpec({}, task, ceilings).ok()) << "at the ceiling is within it";
  const auto refused = [&](Task asking) { return TaskSandboxSpec({}, asking, ceilings).status(); };
  Task t = task;
  t.environment.memory_bytes = 2ull << 30;
  EXPECT_EQ(refused(t).code(), Code::kPermissionDenied);
  EXPECT_EQ(refused(t).message(), "task t-3: environment.memory: 2G is above the job's ceiling of 1G (sandbox.max.memory)");
  t = task;
  t.environment.disk_bytes = 3ull << 30;
  EXPECT_EQ(refused(t).message(), "task t-3: environment.disk: 3G is above the job's ceiling of 2G (sandbox.max.disk)");
  t = task;
  t.environment.pids = 1'000'000;
  EXPECT_EQ(refused(t).message(), "task t-3: environment.pids: 1000000 is above the job's ceiling of 512 (sandbox.max.pids)");
  t = task;
  t.environment.cpus = 1024;
  EXPECT_EQ(refused(t).message(), "task t-3: environment.cpus: 1024 is above the job's ceiling of 2 (sandbox.max.cpus)");
  t = task;
  t.environment.allow = {"10.0.0.7:443", "10.0.0.8:443"};
  EXPECT_EQ(refused(t).message(), "task t-3: environment.allow: 2 rules are above the job's ceiling of 1 (sandbox.max.allow_rules)");
  // The defaults: the node API's maxima, not 1,000,000 pids and 1024 CPUs.
  t = task;
  t.environment.pids = 4097;
  EXPECT_EQ(TaskSandboxSpec({}, t).status().code(), Code::kPermissionDenied);
  t.environment.pids = 4096;
  t.environment.cpus = 4.5;
  EXPECT_EQ(TaskSandboxSpec({}, t).status().code(), Code::kPermissionDenied);
}

TEST(TaskSandboxSpecTest, TheTasksUserOverTheJobsWholePair) {
  sandbox::SandboxSpec job;
  job.user = "1000";
  job.group = "daemon";
  Task task;
  task.id = "t-4";
  auto same = TaskSandboxSpec(job, task);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->user, "1000");
  EXPECT_EQ(same->group, "daemon");
  task.environment.user = "nobody";
  auto over = TaskSandboxSpec(job, task);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->user, "nobody");
  EXPECT_EQ(over->group, "") << "a user alone replaces the pair";
}

TEST(TaskSandboxSpecTest, TheTasksEnvironmentOverTheJobsSpec) {
  sandbox::SandboxSpec job;
  job.memory_bytes = 256ull << 20;
  job.pids = 64;
  job.cpus = 0.5;
  Task task;
  task.id = "t-1";
  auto same = TaskSandboxSpec(job, task);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->memory_bytes, job.memory_bytes);
  EXPECT_EQ(same->disk_bytes, job.disk_bytes);
  EXPECT_EQ(same->image, sandbox::ImageKind::kHost);
  EXPECT_EQ(same->net, sandbox::NetMode::kNone);
  task.environment = {"busybox", 128ull << 20, 32, 0.25, "policy", {"10.0.0.7:443"}, 256ull << 20, "", ""};
  auto over = TaskSandboxSpec(job, task);
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  EXPECT_EQ(over->image, sandbox::ImageKind::kBusybox);
  EXPECT_EQ(over->memory_bytes, 128ull << 20);
  EXPECT_EQ(over->disk_bytes, 256ull << 20);
  EXPECT_EQ(over->pids, 32);
  EXPECT_EQ(over->cpus, 0.25);
  EXPECT_EQ(over->net, sandbox::NetMode::kPolicy);
  ASSERT_EQ(over->allow.size(), 1u);
}

TEST(TaskSandboxSpecTest, HostPathsAndBadRulesAreRefusedNamingTheTaskAndField) {
  Task task;
  task.id = "t-2";
  task.environment.image = "/";
  EXPECT_EQ(TaskSandboxSpec({}, task).status().message(),
            "task t-2: environment.image: '/' is not a built-in image (host, busybox)");
  task.environment.image = "";
  task.environment.net = "policy";
  task.environment.allow = {"not-a-rule"};
  const Status bad = TaskSandboxSpec({}, task).status();
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.message().rfind("task t-2: environment.allow[0]: ", 0), 0u) << bad.message();
  task.environment.net = "";
  task.environment.allow = {"10.0.0.7:443"};
  EXPECT_EQ(TaskSandboxSpec({}, task).status().code(), Code::kInvalidArgument) << "allow rules need net policy";
}

}  // namespace
}  // namespace flashroll
