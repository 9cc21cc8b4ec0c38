#include "tasks/instance.h"

#include <set>
#include <tuple>

#include <gtest/gtest.h>

namespace flashroll::tasks {
namespace {

constexpr Purpose kPurposes[] = {Purpose::kTrain, Purpose::kEval, Purpose::kTest, Purpose::kDemonstrations};

TEST(InstanceTest, NoTwoTriplesShareASeed) {
  std::set<uint64_t> seeds;
  size_t triples = 0;
  for (Purpose purpose : kPurposes) {
    for (int64_t seed : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1'000'003}, kMaxSetSeed}) {
      for (int64_t index : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{1'000'003}, kMaxSetIndex}) {
        seeds.insert(InstanceSeed(purpose, seed, index));
        ++triples;
      }
      for (int64_t index = 3; index < 2000; ++index) {
        seeds.insert(InstanceSeed(purpose, seed, index));
        ++triples;
      }
    }
  }
  EXPECT_EQ(seeds.size(), triples);
  // The old recipe, seed * 1000003 + index, gave (1, 1000003) and (2, 0) one seed.
  EXPECT_NE(InstanceSeed(Purpose::kTrain, 1, 1'000'003), InstanceSeed(Purpose::kTrain, 2, 0));
}

TEST(InstanceTest, AnInstanceIsItsTripleAndNothingElse) {
  InstanceSet set{{FindTaskFamily("arithmetic"), FindTaskFamily("file_sum")}, 3, 5};
  const TaskInstance a = Instance(Purpose::kEval, 7, 5, set);
  const TaskInstance again = Instance(Purpose::kEval, 7, 5, set);
  EXPECT_EQ(a.task.id, again.task.id);
  EXPECT_EQ(a.task.prompt, again.task.prompt);
  EXPECT_EQ(a.task.family, "file_sum") << "instance i is of family i mod |families|";
  EXPECT_EQ(a.seed, InstanceSeed(Purpose::kEval, 7, 5));
  std::set<int> difficulties;
  for (int64_t i = 0; i < 200; ++i) {
    const TaskInstance t = Instance(Purpose::kTest, 7, i, set);
    EXPECT_NE(t.task.id, Instance(Purpose::kEval, 7, i, set).task.id) << i;
    difficulties.insert(t.task.difficulty);
  }
  EXPECT_EQ(difficulties, (std::set<int>{3, 4, 5}));
}

}  // namespace
}  // namespace flashroll::tasks
