// Task instances of a generated set: instance `index` of the set that
// (purpose, seed) names. The one recipe for every generated set: the RL
// job's training tasks, its evaluation and held-out test sets, and the
// demonstrations the default models were trained on.
//
// Sets never share an instance by construction: the instance seed packs
// (purpose, seed, index) injectively (2 + 31 + 31 bits) and then mixes the
// 64 bits with a bijection, so two different triples never give the same
// seed and so never the same task (a task is its family, seed and
// difficulty). Within a set, instance i is of family i mod |families| at a
// difficulty drawn uniformly from the set's range; the instance seed also
// seeds the caller's other draws for it (a sampling seed, a
// demonstration's effort).
//
// Thread safety: plain functions; families are stateless.
#pragma once

#include <cstdint>
#include <vector>

#include "tasks/task.h"

namespace flashroll::tasks {

enum class Purpose : uint64_t {
  kTrain = 0,           // tasks.seed: what the policy trains on
  kEval = 1,            // training.eval_seed, `flashroll eval --seed`: what tuning looks at
  kTest = 2,            // training.test_seed: held out from tuning
  kDemonstrations = 3,  // `flashroll rollout demos --seed`: what the default models saw
};

// Set seeds and indices are below 2^31 (the packing's width).
constexpr int64_t kMaxSetSeed = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxSetIndex = (int64_t{1} << 31) - 1;

struct InstanceSet {
  std::vector<const TaskFamily*> families;  // at least one
  int min_difficulty = 1;
  int max_difficulty = kMaxDifficulty;
};

struct TaskInstance {
  Task task;
  uint64_t seed = 0;  // the instance seed the task was generated from
};

// The instance seed; seed and index in [0, 2^31) (checked by the callers'
// flags and config schemas; outside it the high bits are dropped).
uint64_t InstanceSeed(Purpose purpose, int64_t seed, int64_t index);

// Instance `index` of the set (purpose, seed) over `set`.
TaskInstance Instance(Purpose purpose, int64_t seed, int64_t index, const InstanceSet& set);

}  // namespace flashroll::tasks
