#include "scheduler/training_report.h"

#include <fstream>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(TrainingReportTest, OneRowPerLoggedStepEffortsInNumericOrder) {
  const std::string path = ::testing::TempDir() + "/trainer.jsonl";
  std::ofstream(path) << R"({"step": 1, "version": 1, "samples": 8, "success": 0.5, "reward_by_effort": {"100": 0.25, "1": 0.75},)"
                      << R"( "reasoning_tokens_by_effort": {"1": 40, "100": 210}, "mismatch_abs": 0.00012, "clip_fraction": 0.01, "tokens_per_s": 900})"
                      << "\nnot json\n"
                      << R"({"step": 2, "version": 2, "samples": 8, "success": 0.625, "reward_by_effort": {"1": 0.8}, "mismatch_abs": null})" << "\n";
  const std::string table = TrainingStepsTable(path);
  ASSERT_FALSE(table.empty());
  EXPECT_NE(table.find("1:0.75 100:0.25"), std::string::npos) << table;
  EXPECT_NE(table.find("1:40 100:210"), std::string::npos) << table;
  EXPECT_NE(table.find("1.20e-04"), std::string::npos) << table;
  EXPECT_NE(table.find(" 62.5%"), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3) << "a header and two steps:\n" << table;
  EXPECT_EQ(table.find("nan"), std::string::npos) << "a null mismatch is shown as -:\n" << table;
  EXPECT_EQ(TrainingStepsTable("/nonexistent/trainer.jsonl"), "");
}

TEST(TrainingReportTest, EvalChangeWithItsStandardErrorAndInterval) {
  const Json eval = {
      {"before", {{"by_effort", {{"1", {{"episodes", 100}, {"success_rate", 0.5}, {"mean_reasoning_tokens", 100.0}, {"sd_reasoning_tokens", 50.0}}}}},
                  {"total", {{"episodes", 100}, {"success_rate", 0.5}, {"mean_reasoning_tokens", 100.0}, {"sd_reasoning_tokens", 50.0}}}}},
      {"after", {{"by_effort", {{"1", {{"episodes", 100}, {"success_rate", 0.6}, {"mean_reasoning_tokens", 80.0}, {"sd_reasoning_tokens", 50.0}}}}},
                 {"total", {{"episodes", 100}, {"success_rate", 0.6}, {"mean_reasoning_tokens", 80.0}, {"sd_reasoning_tokens", 50.0}}}}}};
  const std::string text = EvalComparison(eval);
  // SE = sqrt(.5*.5/100 + .6*.4/100) = 7.0%; reasoning SE = sqrt(2 * 2500 / 100) = 7.07, so +-13.9.
  EXPECT_NE(text.find("b=1"), std::string::npos) << text;
  EXPECT_NE(text.find("+10.0% ( 7.0%)"), std::string::npos) << text;
  EXPECT_NE(text.find("-20.0"), std::string::npos) << text;
  EXPECT_NE(text.find("[   -33.9,     -6.1]"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
  EXPECT_EQ(EvalComparison({{"before", eval["before"]}}), "");
}

}  // namespace
}  // namespace flashroll
