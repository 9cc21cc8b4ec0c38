#include "rollout/evaluation.h"

#include <cmath>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(EvaluationTest, JsonGivesRatesMeansAndTheSpreadOfReasoningTokens) {
  EvalReport report;
  EvalCounts& c = report.by_effort[1];
  c.episodes = 3;  // episodes of 10, 20 and 60 reasoning tokens
  c.successes = 2;
  c.turns = 4;
  c.valid_turns = 3;
  c.reasoning_tokens = 90;
  c.reasoning_tokens_sq = 100 + 400 + 3600;
  const nlohmann::json j = report.ToJson()["by_effort"]["1"];
  EXPECT_DOUBLE_EQ(j["success_rate"].get<double>(), 2.0 / 3.0);
  EXPECT_EQ(j["successes"], 2);
  EXPECT_DOUBLE_EQ(j["format_valid_rate"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["mean_reasoning_tokens"].get<double>(), 30.0);
  // sample sd of {10, 20, 60}: sqrt(((-20)^2 + (-10)^2 + 30^2) / 2) = sqrt(700)
  EXPECT_NEAR(j["sd_reasoning_tokens"].get<double>(), std::sqrt(700.0), 1e-9);
  EvalCounts one;
  one.episodes = 1;
  one.reasoning_tokens = 5;
  one.reasoning_tokens_sq = 25;
  report.by_effort[2] = one;
  EXPECT_EQ(report.ToJson()["by_effort"]["2"]["sd_reasoning_tokens"].get<double>(), 0.0);
}

}  // namespace
}  // namespace flashroll
