// The exact verifier's comparison rule (tasks/verifier.h): trimmed text
// equal, integers equal by value and exactly, other numbers within a
// tolerance only when the task declares one.
#include <gtest/gtest.h>

#include "tasks/task.h"
#include "tasks/verifier.h"
#include "tasks/workspace.h"

namespace flashroll {
namespace {

// Answers come from the final message, so the workspace is never touched.
class NoWorkspace : public Workspace {
 public:
  Status WriteFile(const std::string&, const std::string&) override { return Status::Internal("unused"); }
  Result<std::string> ReadFile(const std::string&) override { return Status::Internal("unused"); }
  Result<ExecResult> Exec(const std::string&, std::chrono::milliseconds) override {
    return Status::Internal("unused");
  }
  Result<std::unique_ptr<Workspace>> ForVerification() override { return Status::Internal("unused"); }
};

bool Accepts(const std::string& expected, const std::string& got, std::optional<double> tolerance = 1e-9) {
  Task task;
  task.id = "t";
  task.answer = expected;
  task.check.tolerance = tolerance;
  NoWorkspace workspace;
  return VerifyTask(task, got, workspace).success;
}

TEST(VerifierTest, IntegersCompareExactly) {
  EXPECT_TRUE(Accepts("527359036329561", "527359036329561"));
  // Off by 1000 in 5e14: within a relative 1e-9, but a wrong integer.
  EXPECT_FALSE(Accepts("527359036329561", "527359036330561"));
  EXPECT_FALSE(Accepts("527359036330561", "527359036329561"));
  // Past 2^53, where doubles cannot tell them apart.
  EXPECT_FALSE(Accepts("9007199254740993", "9007199254740992"));
  EXPECT_FALSE(Accepts("123456789012345678901234567890", "123456789012345678901234567891"));
  EXPECT_TRUE(Accepts("123456789012345678901234567890", " 123456789012345678901234567890\n"));
  EXPECT_FALSE(Accepts("1000000000", "1000000001"));
  EXPECT_FALSE(Accepts("2", "3"));
}

TEST(VerifierTest, IntegersCompareByValue) {
  EXPECT_TRUE(Accepts("42", "42.0"));
  EXPECT_TRUE(Accepts("42", "42."));
  EXPECT_TRUE(Accepts("42.00", "42"));
  EXPECT_TRUE(Accepts("42", "+42"));
  EXPECT_TRUE(Accepts("42", "0042"));
  EXPECT_TRUE(Accepts("-7", "-7.000"));
  EXPECT_TRUE(Accepts("0", "-0"));
  EXPECT_TRUE(Accepts("0", "000"));
  EXPECT_FALSE(Accepts("-7", "7"));
  EXPECT_FALSE(Accepts("7", "-7"));
  EXPECT_FALSE(Accepts("42", "42.5"));
  EXPECT_FALSE(Accepts("42", "42.0000001"));
  EXPECT_FALSE(Accepts("42", "4.2e1"));  // integers are written out
  EXPECT_FALSE(Accepts("42", "0x2a"));
  EXPECT_FALSE(Accepts("42", "42 apples"));
  EXPECT_FALSE(Accepts("42", ""));
  EXPECT_FALSE(Accepts("42", "+"));
  EXPECT_FALSE(Accepts("42", "."));
}

TEST(VerifierTest, WithoutADeclaredToleranceDecimalsCompareAsText) {
  EXPECT_FALSE(Accepts("0.3", "0.30000000000000004", std::nullopt));
  EXPECT_FALSE(Accepts("2.5", "2.50", std::nullopt));
  EXPECT_TRUE(Accepts("2.5", " 2.5\n", std::nullopt));
  EXPECT_TRUE(Accepts("42", "42.0", std::nullopt)) << "integers still compare by value";
  EXPECT_FALSE(Accepts("527359036329561", "527359036330561", 1e-3)) << "a tolerance never applies to integers";
}

TEST(VerifierTest, DecimalsCompareWithinADeclaredRelativeBillionth) {
  EXPECT_TRUE(Accepts("0.3", "0.30000000000000004"));
  EXPECT_TRUE(Accepts("2.5", "2.50"));
  EXPECT_TRUE(Accepts("1500.25", "1.50025e3"));
  EXPECT_TRUE(Accepts("1234567.5", "1234567.5000001"));  // 8e-14 relative
  EXPECT_FALSE(Accepts("0.1234567", "0.1234568"));       // 8e-7 relative
  EXPECT_FALSE(Accepts("1234567.5", "1234567.51"));      // 8e-9 relative
  EXPECT_FALSE(Accepts("2.5", "-2.5"));
  // Small numbers are compared to within 1e-9 absolute.
  EXPECT_TRUE(Accepts("0.0000000001", "0.0000000002"));
  EXPECT_FALSE(Accepts("0.000001", "0.000002"));
  EXPECT_FALSE(Accepts("2.5", "nan"));
  EXPECT_FALSE(Accepts("2.5", "2.5x"));
  EXPECT_FALSE(Accepts("1e400", "1e400x"));
}

TEST(VerifierTest, TextComparesAfterTrimming) {
  EXPECT_TRUE(Accepts("Paris", "  Paris\n"));
  EXPECT_FALSE(Accepts("Paris", "paris"));
  EXPECT_FALSE(Accepts("Paris", "Par is"));
  Task task;
  task.answer = "Paris";
  NoWorkspace workspace;
  Verdict wrong = VerifyTask(task, std::string(100, 'x'), workspace);
  EXPECT_FALSE(wrong.success);
  EXPECT_EQ(wrong.reason, "expected 'Paris', got '" + std::string(80, 'x') + "...'");
  // Eighty characters are shown whole.
  EXPECT_EQ(VerifyTask(task, std::string(80, 'y'), workspace).reason,
            "expected 'Paris', got '" + std::string(80, 'y') + "'");
}

}  // namespace
}  // namespace flashroll

namespace flashroll {
namespace {

// The kinds that run code run them through the Workspace; here a
// LocalWorkspace (a scratch directory), in the job the task's sandbox.
class CheckKindsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ws = LocalWorkspace::Create();
    ASSERT_TRUE(ws.ok()) << ws.status().ToString();
    ws_ = std::move(*ws);
  }
  Verdict Run(const TaskCheck& check, const std::string& got) { return Verify(check, "", got, *ws_); }
  std::unique_ptr<LocalWorkspace> ws_;
};

TEST_F(CheckKindsTest, RegexMatchesTheWholeTrimmedAnswer) {
  TaskCheck check;
  check.kind = "regex";
  check.pattern = "[0-9]+ apples";
  EXPECT_TRUE(Run(check, " 12 apples\n").success);
  const Verdict partial = Run(check, "12 apples and pears");
  EXPECT_FALSE(partial.success);
  EXPECT_EQ(partial.reason, "'12 apples and pears' does not match /[0-9]+ apples/");
  check.pattern = "([a-z";
  const Verdict bad = Run(check, "x");
  EXPECT_FALSE(bad.success);
  EXPECT_EQ(bad.reason.rfind("pattern /([a-z/: ", 0), 0u) << bad.reason;
}

TEST_F(CheckKindsTest, PythonCheckReadsTheAnswerAndIgnoresModulesTheAgentPlanted) {
  TaskCheck check;
  check.kind = "python";
  check.script = "import json, sys\nsys.exit(0 if json.loads(sys.stdin.read()) == 7 else 1)\n";
  EXPECT_TRUE(Run(check, "7").success);
  // An agent that leaves a json.py in the working directory cannot pass the check.
  ASSERT_TRUE(ws_->WriteFile("json.py", "raise SystemExit(0)\n").ok());
  const Verdict wrong = Run(check, "8");
  EXPECT_FALSE(wrong.success);
  EXPECT_EQ(wrong.reason.rfind("python check: exit 1", 0), 0u) << wrong.reason;
  EXPECT_TRUE(Run(check, "7").success);
}

TEST_F(CheckKindsTest, TestsMustAllPassAndIdsAreQuoted) {
  ASSERT_TRUE(ws_->WriteFile("run_test.sh", "case \"$1\" in a|b) exit 0;; *) echo \"failed $1\" >&2; exit 1;; esac\n").ok());
  TaskCheck check;
  check.kind = "tests";
  check.test_command = "sh run_test.sh";
  check.fail_to_pass = {"a"};
  check.pass_to_pass = {"b"};
  EXPECT_TRUE(Run(check, "").success);
  check.pass_to_pass = {"b", "c"};
  const Verdict broken = Run(check, "");
  EXPECT_FALSE(broken.success);
  EXPECT_EQ(broken.reason, "pass_to_pass test c: exit 1: failed c");
  check.pass_to_pass = {};
  check.fail_to_pass = {"x'; touch pwned; '"};
  EXPECT_FALSE(Run(check, "").success);
  EXPECT_FALSE(ws_->ReadFile("pwned").ok()) << "a test id is one quoted argument, never shell";
}

TEST_F(CheckKindsTest, AnUnknownKindFailsEveryOutcome) {
  TaskCheck check;
  check.kind = "vibes";
  EXPECT_FALSE(IsCheckKind("vibes"));
  EXPECT_TRUE(IsCheckKind("tests"));
  EXPECT_EQ(Run(check, "anything").reason, "unknown verifier kind 'vibes'");
}

TEST_F(CheckKindsTest, SetupCommandsRunAfterTheFilesAndAFailureNamesTheCommand) {
  Task task;
  task.id = "t-1";
  task.files = {{"in.txt", "3\n"}};
  task.setup = {"cp in.txt made.txt", "false"};
  const Status failed = PrepareWorkspace(task, *ws_);
  EXPECT_EQ(failed.code(), Code::kFailedPrecondition);
  EXPECT_EQ(failed.message().rfind("task t-1: setup[1] 'false': exit 1", 0), 0u) << failed.message();
  EXPECT_EQ(*ws_->ReadFile("made.txt"), "3\n");
}

}  // namespace
}  // namespace flashroll
