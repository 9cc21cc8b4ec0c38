#include <gtest/gtest.h>

#include "common/strings.h"
#include "tasks/reference_solver.h"
#include "tasks/task.h"
#include "tasks/workspace.h"

namespace flashroll {
namespace {

TEST(TaskFamiliesTest, RegistryFindsEveryFamily) {
  ASSERT_GE(TaskFamilies().size(), 4u);
  for (const TaskFamily* family : TaskFamilies()) {
    EXPECT_EQ(FindTaskFamily(family->name()), family);
  }
  EXPECT_EQ(FindTaskFamily("no_such_family"), nullptr);
}

TEST(TaskFamiliesTest, GenerationIsDeterministicAndVaried) {
  for (const TaskFamily* family : TaskFamilies()) {
    Task a = family->Generate(42, 3), b = family->Generate(42, 3), c = family->Generate(43, 3);
    EXPECT_EQ(a.prompt, b.prompt) << family->name();
    EXPECT_EQ(a.answer, b.answer) << family->name();
    EXPECT_EQ(a.id, b.id);
    EXPECT_NE(a.id, c.id);
    EXPECT_TRUE(a.prompt != c.prompt || a.files.size() != c.files.size() ||
                (!a.files.empty() && a.files[0].contents != c.files[0].contents))
        << family->name() << " gave the same task for two seeds";
  }
}

// The reference solution, run for real with bash, python3, awk and grep,
// must reach the generator's answer at every difficulty: this ties the
// generator, the solution and the verifier together.
TEST(TaskFamiliesTest, ReferenceSolutionsSolveEveryDifficulty) {
  for (const TaskFamily* family : TaskFamilies()) {
    for (int difficulty = 1; difficulty <= kMaxDifficulty; ++difficulty) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        Task task = family->Generate(seed, difficulty);
        auto workspace = LocalWorkspace::Create();
        ASSERT_TRUE(workspace.ok()) << workspace.status().ToString();
        auto run = RunReferenceSolution(*family, task, **workspace);
        ASSERT_TRUE(run.ok()) << run.status().ToString();
        EXPECT_TRUE(run->verdict.success) << task.id << ": " << run->verdict.reason << "\n" << task.prompt;
        EXPECT_FALSE(run->steps.empty()) << task.id;
      }
    }
  }
}

// Regression: a product once overflowed int64 in the generator, so the
// expected answer disagreed with Python's exact integers.
TEST(TaskFamiliesTest, ArithmeticAnswersStayWithinExactRange) {
  const TaskFamily* family = FindTaskFamily("arithmetic");
  for (uint64_t seed = 1; seed <= 20000; ++seed) {
    Task task = family->Generate(seed, 1 + static_cast<int>(seed % 5));
    const long long answer = std::stoll(task.answer);
    ASSERT_LT(answer < 0 ? -answer : answer, 2'000'000'000'000'000LL) << task.id << ": " << task.prompt;
  }
}

TEST(TaskFamiliesTest, LookupChainNeedsTwoOrMoreCalls) {
  const TaskFamily* family = FindTaskFamily("lookup_chain");
  ASSERT_NE(family, nullptr);
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    auto workspace = LocalWorkspace::Create();
    ASSERT_TRUE(workspace.ok());
    auto run = RunReferenceSolution(*family, family->Generate(seed, 4), **workspace);
    ASSERT_TRUE(run.ok());
    EXPECT_GE(run->steps.size(), 2u);
  }
}

TEST(TaskFamiliesTest, VerifierRejectsWrongAnswers) {
  const TaskFamily* family = FindTaskFamily("arithmetic");
  Task task = family->Generate(7, 2);
  auto workspace = LocalWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  EXPECT_TRUE(VerifyTask(task, " " + task.answer + "\n", **workspace).success);
  Verdict wrong = VerifyTask(task, task.answer + "1", **workspace);
  EXPECT_FALSE(wrong.success);
  EXPECT_NE(wrong.reason.find("expected '" + task.answer + "'"), std::string::npos);
  EXPECT_FALSE(VerifyTask(task, "", **workspace).success);
}

TEST(TaskFamiliesTest, FileTaskIsVerifiedFromTheFileNotTheMessage) {
  const TaskFamily* family = FindTaskFamily("file_sum");
  Task task = family->Generate(3, 2);
  auto workspace = LocalWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  ASSERT_TRUE(PrepareWorkspace(task, **workspace).ok());
  Verdict missing = VerifyTask(task, task.answer, **workspace);
  EXPECT_FALSE(missing.success);
  EXPECT_EQ(missing.reason, "answer.txt was not written");
  ASSERT_TRUE((*workspace)->WriteFile("answer.txt", task.answer + "\n").ok());
  EXPECT_TRUE(VerifyTask(task, "", **workspace).success);
}

// Inventory rows of the same item in other warehouses are decoys: a total
// over the item alone must be wrong for most instances, and the reference
// solution still needs three calls (look, filter, add).
TEST(TaskFamiliesTest, InventoryCountsOnlyTheAskedWarehouse) {
  const TaskFamily* family = FindTaskFamily("inventory");
  ASSERT_NE(family, nullptr);
  int item_only_total_differs = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Task task = family->Generate(seed, 5);
    const std::string& prompt = task.prompt;
    const size_t of = prompt.find("units of ") + 9;
    const std::string item = prompt.substr(of, prompt.find(' ', of) - of);
    long long item_total = 0;
    for (const std::string& line : SplitNonEmpty(task.files.at(0).contents, '\n')) {
      if (line.rfind(item + ",", 0) == 0) item_total += std::stoll(line.substr(line.rfind(',') + 1));
    }
    item_only_total_differs += std::to_string(item_total) != task.answer ? 1 : 0;
    if (seed <= 5) {
      auto workspace = LocalWorkspace::Create();
      ASSERT_TRUE(workspace.ok());
      auto run = RunReferenceSolution(*family, task, **workspace);
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      EXPECT_TRUE(run->verdict.success) << task.id << ": " << run->verdict.reason;
      EXPECT_EQ(run->steps.size(), 3u) << task.id;
    }
  }
  EXPECT_GE(item_only_total_differs, 10);
}

}  // namespace
}  // namespace flashroll
