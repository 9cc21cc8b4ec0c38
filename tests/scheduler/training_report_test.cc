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
  EXPECT_EQ(text.find("median"), std::string::npos) << "no episodes, no median:\n" << text;
  EXPECT_EQ(EvalComparison({{"before", eval["before"]}}), "");
}

// The job's evaluation (scheduler/job_evaluation.h) nests the set's report
// at T = 1.0 and the held-out test set's; each gets its own table.
TEST(TrainingReportTest, TheTablesAtTemperature1AndOfTheTestSetFollow) {
  const auto report = [](double success, double temperature) {
    const Json counts = {{"episodes", 100}, {"success_rate", success}, {"mean_reasoning_tokens", 100.0},
                         {"sd_reasoning_tokens", 50.0}};
    return Json{{"by_effort", {{"1", counts}}}, {"total", counts}, {"temperature", temperature}};
  };
  const auto side = [&](double tuning, double t1, double test) {
    Json s = report(tuning, 1.4);
    s["at_temperature_1"] = report(t1, 1.0);
    s["test"] = report(test, 1.4);
    s["test"]["at_temperature_1"] = report(test - 0.1, 1.0);
    return s;
  };
  const std::string text = EvalComparison({{"before", side(0.5, 0.6, 0.4)}, {"after", side(0.7, 0.65, 0.5)}});
  const size_t tuning = text.find("tuning set (training.eval_seed) at T = 1.4:\n");
  const size_t tuning_t1 = text.find("tuning set (training.eval_seed) at T = 1:\n");
  const size_t test = text.find("held-out test set (training.test_seed) at T = 1.4:\n");
  const size_t test_t1 = text.find("held-out test set (training.test_seed) at T = 1:\n");
  ASSERT_NE(tuning, std::string::npos) << text;
  ASSERT_NE(tuning_t1, std::string::npos) << text;
  ASSERT_NE(test, std::string::npos) << text;
  ASSERT_NE(test_t1, std::string::npos) << text;
  EXPECT_LT(tuning, tuning_t1);
  EXPECT_LT(tuning_t1, test);
  EXPECT_LT(test, test_t1);
  EXPECT_NE(text.find("+20.0%", tuning), std::string::npos) << text;
  EXPECT_LT(text.find("+5.0%", tuning_t1), test) << text;
  EXPECT_NE(text.find("+10.0%", test_t1), std::string::npos) << text;
}

// training.eval_temperatures: every other temperature's report
// ("at_temperature_T") gets a table; T = 0 is named greedy.
TEST(TrainingReportTest, EveryEvaluatedTemperatureGetsItsTableAndZeroIsGreedy) {
  const auto report = [](double success, double temperature) {
    const Json counts = {{"episodes", 100}, {"success_rate", success}, {"mean_reasoning_tokens", 100.0},
                         {"sd_reasoning_tokens", 50.0}};
    return Json{{"by_effort", {{"1", counts}}}, {"total", counts}, {"temperature", temperature}};
  };
  const auto side = [&](double t1, double t07, double greedy) {
    Json s = report(t1, 1.0);
    s["at_temperature_0.7"] = report(t07, 0.7);
    s["at_temperature_0"] = report(greedy, 0.0);
    return s;
  };
  const std::string text = EvalComparison({{"before", side(0.5, 0.6, 0.7)}, {"after", side(0.6, 0.62, 0.71)}});
  const size_t t1 = text.find("tuning set (training.eval_seed) at T = 1:\n");
  const size_t t07 = text.find("tuning set (training.eval_seed) at T = 0.7:\n");
  const size_t greedy = text.find("tuning set (training.eval_seed) greedy (T = 0):\n");
  ASSERT_NE(t1, std::string::npos) << text;
  ASSERT_NE(t07, std::string::npos) << text;
  ASSERT_NE(greedy, std::string::npos) << text;
  EXPECT_NE(text.find("+10.0%", t1), std::string::npos) << text;
  EXPECT_NE(text.find("+2.0%", t07), std::string::npos) << text;
  EXPECT_NE(text.find("+1.0%", greedy), std::string::npos) << text;
}

TEST(TrainingReportTest, WithEpisodesTheChangeIsPairedByEpisode) {
  const auto episodes = [](std::vector<int> success, std::vector<int> reasoning) {
    Json list = Json::array();
    for (size_t i = 0; i < success.size(); ++i) {
      list.push_back({{"index", i}, {"effort", 1}, {"success", success[i] == 1}, {"reasoning_tokens", reasoning[i]}});
    }
    return list;
  };
  Json before = {{"by_effort", {{"1", Json::object()}}}, {"total", Json::object()},
                 {"episodes", episodes({1, 0, 0, 1}, {100, 100, 100, 100})}};
  Json after = {{"by_effort", {{"1", Json::object()}}}, {"total", Json::object()},
                {"episodes", episodes({1, 1, 0, 1, 1}, {90, 80, 100, 70, 5})}};
  // Another effort's episode counts in the total only.
  before["episodes"].push_back({{"index", 7}, {"effort", 50}, {"success", true}, {"reasoning_tokens", 10}});
  after["episodes"].push_back({{"index", 7}, {"effort", 50}, {"success", false}, {"reasoning_tokens", 10}});
  const std::string text = EvalComparison({{"before", before}, {"after", after}});
  // Index 4 has no "before": left out. Effort 1: d = 0, 1, 0, 0: +25% with
  // SE sd(d)/sqrt(4) = 0.5/2; reasoning d = -10, -20, 0, -30: -15 with SE
  // 12.91/2 = 6.45, so [-27.7, -2.3].
  EXPECT_NE(text.find("paired SE"), std::string::npos) << text;
  EXPECT_NE(text.find("b=1             4    50.0%    75.0%   +25.0% (25.0%)"), std::string::npos) << text;
  EXPECT_NE(text.find("[   -27.7,     -2.3]"), std::string::npos) << text;
  // The median of -30, -20, -10, 0 is -15; three episodes shorter, none longer.
  EXPECT_NE(text.find("[   -27.7,     -2.3]     -15.0        3/0"), std::string::npos) << text;
  // Total: d = 0, 1, 0, 0, -1: mean 0, sd sqrt(2/4), SE 0.316.
  EXPECT_NE(text.find("total           5    60.0%    60.0%    +0.0% (31.6%)"), std::string::npos) << text;
  // Reasoning -30, -20, -10, 0, 0 (effort 50's episode): median -10.
  EXPECT_NE(text.find("     -10.0        3/0"), std::string::npos) << text;
}

}  // namespace
}  // namespace flashroll
