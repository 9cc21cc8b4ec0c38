#include "rewards/length_reward.h"

#include <cmath>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

LengthRewardParams Params() {
  LengthRewardParams p;
  p.k0 = 0.2;
  p.c_max = 0.5;
  p.l_norm = 1000;
  p.lambda = 0.5;
  return p;
}

TEST(LengthRewardTest, ScaleIsK0AtMinimumEffortAndDecaysWithTau) {
  const LengthRewardParams p = Params();
  EXPECT_DOUBLE_EQ(LengthPenaltyScale(p, 1), 0.2);
  // tau = 0.5 * 99 = 49.5; at b = 100 the exponent is -99 / 49.5 = -2.
  EXPECT_NEAR(LengthPenaltyScale(p, 100), 0.2 * std::exp(-2.0), 1e-15);
  EXPECT_NEAR(LengthPenaltyScale(p, 50.5), 0.2 * std::exp(-1.0), 1e-15);
}

TEST(LengthRewardTest, PenaltyIsProportionalToReasoningTokens) {
  const LengthRewardParams p = Params();
  // k(1) * 500 / 1000 = 0.1.
  EXPECT_NEAR(LengthReward(p, 1, 500), -0.1, 1e-15);
  EXPECT_NEAR(LengthReward(p, 1, 1000), -0.2, 1e-15);
  EXPECT_EQ(LengthReward(p, 1, 0), 0.0);
  EXPECT_NEAR(LengthReward(p, 100, 1000), -0.2 * std::exp(-2.0), 1e-15);
}

TEST(LengthRewardTest, PenaltyIsCappedAtCMax) {
  const LengthRewardParams p = Params();
  // k(1) * 10000 / 1000 = 2 > c_max.
  EXPECT_DOUBLE_EQ(LengthReward(p, 1, 10'000), -0.5);
  EXPECT_NEAR(LengthReward(p, 1, 2'499), -0.4998, 1e-12);  // just under the cap
}

TEST(LengthRewardTest, LowerEffortPenalisesTheSameLengthMore) {
  const LengthRewardParams p = Params();
  EXPECT_LT(LengthReward(p, 1, 300), LengthReward(p, 50, 300));
  EXPECT_LT(LengthReward(p, 50, 300), LengthReward(p, 100, 300));
}

TEST(LengthRewardTest, EffortScaleNotTheJobsEffortsSetsTau) {
  LengthRewardParams p = Params();
  p.b_min = 1;
  p.b_max = 100;
  const double wide = LengthPenaltyScale(p, 50);
  p.b_max = 50;  // a different scale changes tau
  EXPECT_NE(LengthPenaltyScale(p, 50), wide);
}

}  // namespace
TEST(LengthRewardTest, EverySamplePaysThePenaltyUnlessOnlySuccessesDo) {
  LengthRewardParams p;
  p.k0 = 1.0;
  p.c_max = 1.0;
  p.l_norm = 100;
  const double paid = LengthReward(p, 1, 50);
  EXPECT_DOUBLE_EQ(paid, -0.5);
  EXPECT_DOUBLE_EQ(SampleLengthReward(p, 1, 50, true), paid);
  EXPECT_DOUBLE_EQ(SampleLengthReward(p, 1, 50, false), paid);
  p.success_only = true;
  EXPECT_DOUBLE_EQ(SampleLengthReward(p, 1, 50, true), paid);
  EXPECT_DOUBLE_EQ(SampleLengthReward(p, 1, 50, false), 0.0);
}

}  // namespace flashroll
