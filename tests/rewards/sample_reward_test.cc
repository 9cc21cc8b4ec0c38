#include "rewards/sample_reward.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(SampleRewardTest, TheVerifiersOneOrZeroPlusTheLengthTerm) {
  LengthRewardParams p;
  p.success_only = true;
  const SampleReward accepted = ScoreSample(p, 1, 100, true);
  EXPECT_EQ(accepted.verifier, 1.0);
  EXPECT_DOUBLE_EQ(accepted.length, SampleLengthReward(p, 1, 100, true));
  EXPECT_LT(accepted.length, 0.0);
  EXPECT_DOUBLE_EQ(accepted.total(), 1.0 + accepted.length);
  const SampleReward rejected = ScoreSample(p, 1, 100, false);
  EXPECT_EQ(rejected.verifier, 0.0);
  EXPECT_EQ(rejected.length, 0.0) << "success_only: a rejected sample pays no length penalty";
  EXPECT_EQ(rejected.total(), 0.0);
}

}  // namespace
}  // namespace flashroll
