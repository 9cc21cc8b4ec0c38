#include "tasks/task_record.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(TaskRecordTest, EveryFamilysTaskRoundTrips) {
  for (const TaskFamily* family : TaskFamilies()) {
    const Task task = family->Generate(77, 6);
    const TaskRecord record = ToTaskRecord(task);
    auto back = FromTaskRecord(task.family, task.id, record);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->prompt, task.prompt);
    EXPECT_EQ(back->answer, task.answer);
    EXPECT_EQ(back->answer_file, task.answer_file);
    EXPECT_EQ(back->difficulty, task.difficulty);
    ASSERT_EQ(back->files.size(), task.files.size());
    for (size_t i = 0; i < task.files.size(); ++i) {
      EXPECT_EQ(back->files[i].path, task.files[i].path);
      EXPECT_EQ(back->files[i].contents, task.files[i].contents);
    }
  }
}

TEST(TaskRecordTest, ChecksAndSetupRoundTrip) {
  Task task;
  task.family = "file";
  task.id = "repo-fix-1";
  task.prompt = "fix it";
  task.setup = {"git init -q", "make"};
  task.check.kind = "tests";
  task.check.tolerance = 0.001;
  task.check.pattern = "x+";
  task.check.script = "print(1)";
  task.check.test_command = "pytest -q";
  task.check.fail_to_pass = {"t::a"};
  task.check.pass_to_pass = {"t::b", "t::c"};
  task.check.files = {{"tests/test_a.py", "def test_a(): pass\n"}};
  task.environment = {"busybox", 128ull << 20, 32, 0.25, "policy", {"10.0.0.7:443"}, 256ull << 20, "nobody", "daemon"};
  auto back = FromTaskRecord(task.family, task.id, ToTaskRecord(task));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->environment.image, "busybox");
  EXPECT_EQ(back->environment.memory_bytes, 128ull << 20);
  EXPECT_EQ(back->environment.disk_bytes, 256ull << 20);
  EXPECT_EQ(back->environment.pids, 32);
  EXPECT_EQ(back->environment.cpus, 0.25);
  EXPECT_EQ(back->environment.net, "policy");
  EXPECT_EQ(back->environment.allow, task.environment.allow);
  EXPECT_EQ(back->environment.user, "nobody");
  EXPECT_EQ(back->environment.group, "daemon");
  EXPECT_EQ(back->setup, task.setup);
  EXPECT_EQ(back->check.kind, "tests");
  EXPECT_EQ(back->check.tolerance, 0.001);
  EXPECT_EQ(back->check.pattern, "x+");
  EXPECT_EQ(back->check.script, "print(1)");
  EXPECT_EQ(back->check.test_command, "pytest -q");
  EXPECT_EQ(back->check.fail_to_pass, task.check.fail_to_pass);
  EXPECT_EQ(back->check.pass_to_pass, task.check.pass_to_pass);
  ASSERT_EQ(back->check.files.size(), 1u);
  EXPECT_EQ(back->check.files[0].path, "tests/test_a.py");
  EXPECT_EQ(back->check.files[0].contents, "def test_a(): pass\n");
  EXPECT_EQ(ToTaskRecord(task).problem_json.find("test_a.py"), std::string::npos)
      << "the check's files travel in the verifier record, not the problem the agent is shown";
  Task plain = TaskFamilies()[0]->Generate(3, 2);
  auto exact = FromTaskRecord(plain.family, plain.id, ToTaskRecord(plain));
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->check.kind, "exact");
  EXPECT_FALSE(exact->check.tolerance.has_value());
  EXPECT_TRUE(exact->setup.empty());
}

TEST(TaskRecordTest, DamagedRecordsNameTaskAndField) {
  const TaskRecord good = ToTaskRecord(TaskFamilies()[0]->Generate(1, 1));
  const auto error = [&](TaskRecord r) { return FromTaskRecord("f", "f-1", r).status().message(); };
  EXPECT_EQ(error({"{", good.verifier_json}), "task f-1: problem.prompt is missing or not a string");
  EXPECT_EQ(error({good.problem_json, R"({"answer": 3})"}), "task f-1: verifier.answer is missing or not a string");
  EXPECT_EQ(error({good.problem_json, R"({"answer": "3"})"}), "task f-1: verifier.kind is missing or not a string");
  EXPECT_EQ(error({good.problem_json, R"({"answer": "3", "kind": "vibes"})"}), "task f-1: verifier.kind 'vibes' is unknown");
  EXPECT_EQ(error({good.problem_json, R"({"answer": "3", "kind": "exact", "tolerance": "x"})"}),
            "task f-1: verifier.tolerance is not a number");
  EXPECT_EQ(error({good.problem_json, R"({"answer": "3", "kind": "tests", "pass_to_pass": [1]})"}),
            "task f-1: verifier.pass_to_pass holds a non-string");
  EXPECT_EQ(error({R"({"prompt":"p","answer_file":"","difficulty":"x","files":[]})", good.verifier_json}),
            "task f-1: problem.difficulty is missing or not an integer");
  EXPECT_EQ(error({R"({"prompt":"p","answer_file":"","difficulty":1,"files":{}})", good.verifier_json}),
            "task f-1: problem.files is missing or not a list");
  EXPECT_EQ(error({R"({"prompt":"p","answer_file":"","difficulty":1,"files":[{"path":"a"}]})", good.verifier_json}),
            "task f-1: problem.files[].contents is missing or not a string");
}

}  // namespace
}  // namespace flashroll
