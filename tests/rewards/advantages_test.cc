#include "rewards/advantages.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(AdvantagesTest, GrpoNormalisesByTheGroupsMeanAndStd) {
  const std::vector<GroupMember> group = {{1.0, false}, {0.0, false}, {1.0, false}, {0.0, false}};
  const auto a = GroupAdvantages(group, AdvantageMode::kGrpo);
  ASSERT_EQ(a.size(), 4u);
  // mean 0.5, population std 0.5.
  EXPECT_NEAR(a[0], 0.5 / (0.5 + 1e-6), 1e-12);
  EXPECT_NEAR(a[1], -0.5 / (0.5 + 1e-6), 1e-12);
}

TEST(AdvantagesTest, GrpoUsesThePopulationStd) {
  const std::vector<GroupMember> group = {{3.0, false}, {1.0, false}, {2.0, false}};
  const auto a = GroupAdvantages(group, AdvantageMode::kGrpo);
  const double std_dev = std::sqrt(2.0 / 3.0);
  EXPECT_NEAR(a[0], 1.0 / (std_dev + 1e-6), 1e-12);
  EXPECT_NEAR(a[2], 0.0, 1e-12);
}

TEST(AdvantagesTest, DrGrpoOnlyCentres) {
  const std::vector<GroupMember> group = {{0.9, false}, {0.7, false}, {0.2, false}};
  const auto a = GroupAdvantages(group, AdvantageMode::kDrGrpo);
  EXPECT_NEAR(a[0], 0.9 - 0.6, 1e-12);
  EXPECT_NEAR(a[1], 0.7 - 0.6, 1e-12);
  EXPECT_NEAR(a[2], 0.2 - 0.6, 1e-12);
}

TEST(AdvantagesTest, EqualRewardsGiveZeroAdvantage) {
  const std::vector<GroupMember> group = {{0.4, false}, {0.4, false}};
  for (double a : GroupAdvantages(group, AdvantageMode::kGrpo)) EXPECT_EQ(a, 0.0);
}

TEST(AdvantagesTest, FailedSamplesAreLeftOutOfTheStatisticsAndGetZero) {
  // The failed sample's reward would pull the mean down if it counted.
  const std::vector<GroupMember> group = {{1.0, false}, {0.0, false}, {-5.0, true}};
  const auto a = GroupAdvantages(group, AdvantageMode::kDrGrpo);
  EXPECT_NEAR(a[0], 0.5, 1e-12);
  EXPECT_NEAR(a[1], -0.5, 1e-12);
  EXPECT_EQ(a[2], 0.0);
  const auto g = GroupAdvantages(group, AdvantageMode::kGrpo);
  EXPECT_NEAR(g[0], 0.5 / (0.5 + 1e-6), 1e-12);
  EXPECT_EQ(g[2], 0.0);
}

TEST(AdvantagesTest, AllFailedGivesZeros) {
  const std::vector<GroupMember> group = {{1.0, true}, {0.0, true}};
  for (double a : GroupAdvantages(group, AdvantageMode::kGrpo)) EXPECT_EQ(a, 0.0);
}

}  // namespace
}  // namespace flashroll
