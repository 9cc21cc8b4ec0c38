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

TEST(TaskRecordTest, DamagedRecordsNameTaskAndField) {
  const TaskRecord good = ToTaskRecord(TaskFamilies()[0]->Generate(1, 1));
  const auto error = [&](TaskRecord r) { return FromTaskRecord("f", "f-1", r).status().message(); };
  EXPECT_EQ(error({"{", good.verifier_json}), "task f-1: problem.prompt is missing or not a string");
  EXPECT_EQ(error({good.problem_json, R"({"answer": 3})"}), "task f-1: verifier.answer is missing or not a string");
  EXPECT_EQ(error({R"({"prompt":"p","answer_file":"","difficulty":"x","files":[]})", good.verifier_json}),
            "task f-1: problem.difficulty is missing or not an integer");
  EXPECT_EQ(error({R"({"prompt":"p","answer_file":"","difficulty":1,"files":{}})", good.verifier_json}),
            "task f-1: problem.files is missing or not a list");
  EXPECT_EQ(error({R"({"prompt":"p","answer_file":"","difficulty":1,"files":[{"path":"a"}]})", good.verifier_json}),
            "task f-1: problem.files[].contents is missing or not a string");
}

}  // namespace
}  // namespace flashroll
