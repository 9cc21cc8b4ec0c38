// The verifier's comparison rule (tasks/task.h): trimmed text equal, integers
// equal by value and exactly, other numbers within a relative 1e-9.
#include <gtest/gtest.h>

#include "tasks/task.h"
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
};

bool Accepts(const std::string& expected, const std::string& got) {
  Task task;
  task.id = "t";
  task.answer = expected;
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

TEST(VerifierTest, DecimalsCompareWithinARelativeBillionth) {
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
