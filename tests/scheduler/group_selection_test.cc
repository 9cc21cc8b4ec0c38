#include "scheduler/group_selection.h"

#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(DynamicSamplingTest, AGroupIsZeroVarianceWhenItsUnfailedSamplesAgree) {
  using O = GroupSampleOutcome;
  const std::vector<O> all_right = {{0.8, true, false}, {0.9, true, false}};
  const std::vector<O> split = {{1.0, true, false}, {0.0, false, false}};
  const std::vector<O> same_reward = {{0.0, false, false}, {0.0, false, false}, {5.0, true, true}};
  const std::vector<O> all_failed = {{0.0, false, true}, {0.0, false, true}};
  EXPECT_FALSE(IsZeroVariance(DynamicSampling::kNone, same_reward));
  EXPECT_FALSE(IsZeroVariance(DynamicSampling::kNone, all_failed));
  // The verdict filter ignores the length term's spread; the reward one does not.
  EXPECT_TRUE(IsZeroVariance(DynamicSampling::kVerifier, all_right));
  EXPECT_FALSE(IsZeroVariance(DynamicSampling::kReward, all_right));
  EXPECT_FALSE(IsZeroVariance(DynamicSampling::kVerifier, split));
  EXPECT_FALSE(IsZeroVariance(DynamicSampling::kReward, split));
  // A failed sample (left out of the advantages) does not split a group.
  EXPECT_TRUE(IsZeroVariance(DynamicSampling::kReward, same_reward));
  EXPECT_TRUE(IsZeroVariance(DynamicSampling::kVerifier, same_reward));
  EXPECT_TRUE(IsZeroVariance(DynamicSampling::kVerifier, all_failed));
  EXPECT_EQ(ParseDynamicSampling("verifier"), DynamicSampling::kVerifier);
  EXPECT_EQ(ParseDynamicSampling("reward"), DynamicSampling::kReward);
  EXPECT_EQ(ParseDynamicSampling("none"), DynamicSampling::kNone);
}

PassRateSelection Selection() {
  PassRateSelection s;
  s.enabled = true;
  s.min_pass_rate = 0.1;
  s.max_pass_rate = 0.9;
  s.window = 8;
  s.min_samples = 4;
  s.probe_every = 3;
  return s;
}

TEST(PassRateSelectorTest, ACellOpensUntilMeasuredThenOnlyInsideTheRange) {
  PassRateSelector selector(Selection());
  const TaskCell easy{"arithmetic", 3, 1}, mixed{"arithmetic", 5, 1};
  EXPECT_TRUE(selector.Accept(easy)) << "unmeasured";
  selector.Record(easy, 2, 2);
  EXPECT_TRUE(selector.Accept(easy)) << "2 samples, under min_samples 4";
  selector.Record(easy, 4, 4);
  EXPECT_EQ(selector.Rate(easy), std::make_pair(1.0, int64_t{6}));
  // Saturated: refused, but every probe_every-th group opens to measure again.
  EXPECT_FALSE(selector.Accept(easy));
  EXPECT_FALSE(selector.Accept(easy));
  EXPECT_TRUE(selector.Accept(easy)) << "the probe";
  EXPECT_FALSE(selector.Accept(easy));
  selector.Record(mixed, 2, 4);
  EXPECT_TRUE(selector.Accept(mixed));
  EXPECT_TRUE(selector.Accept(mixed));
  // Cells are told apart by effort and difficulty.
  EXPECT_TRUE(selector.Accept({"arithmetic", 3, 100}));
}

TEST(PassRateSelectorTest, TheRateIsOverTheLastWindowSamplesSoALearntCellLeavesAndAnUnlearntOneReturns) {
  PassRateSelector selector(Selection());
  const TaskCell cell{"file_sum", 4, 50};
  selector.Record(cell, 0, 8);
  EXPECT_EQ(selector.Rate(cell).first, 0.0);
  EXPECT_FALSE(selector.Accept(cell)) << "never solved";
  selector.Record(cell, 4, 4);  // the window keeps the last 8: 4 of 8
  EXPECT_EQ(selector.Rate(cell), std::make_pair(0.5, int64_t{8}));
  EXPECT_TRUE(selector.Accept(cell));
  selector.Record(cell, 8, 8);
  EXPECT_FALSE(selector.Accept(cell)) << "learnt: always solved now";
}

TEST(PassRateSelectorTest, DisabledAcceptsEverything) {
  PassRateSelector selector(PassRateSelection{});
  const TaskCell cell{"arithmetic", 3, 1};
  selector.Record(cell, 8, 8);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(selector.Accept(cell));
}

}  // namespace
}  // namespace flashroll
