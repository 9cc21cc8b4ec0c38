#include "tasks/instance.h"

#include "tasks/rng.h"

namespace flashroll::tasks {
namespace {

// SplitMix64's finaliser: each step (xor with a right shift, multiplication
// by an odd constant) is invertible on 64 bits, so the whole is a bijection.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t InstanceSeed(Purpose purpose, int64_t seed, int64_t index) {
  const uint64_t packed = (static_cast<uint64_t>(purpose) << 62) |
                          ((static_cast<uint64_t>(seed) & static_cast<uint64_t>(kMaxSetSeed)) << 31) |
                          (static_cast<uint64_t>(index) & static_cast<uint64_t>(kMaxSetIndex));
  return Mix(packed);
}

TaskInstance Instance(Purpose purpose, int64_t seed, int64_t index, const InstanceSet& set) {
  TaskInstance instance;
  instance.seed = InstanceSeed(purpose, seed, index);
  // The difficulty comes from a stream of its own: the families seed their
  // generators from the instance seed too.
  TaskRng rng(Mix(instance.seed ^ 0xD1FF1C017ull));
  const TaskFamily& family = *set.families[static_cast<size_t>(index) % set.families.size()];
  instance.task = family.Generate(instance.seed, static_cast<int>(rng.Int(set.min_difficulty, set.max_difficulty)));
  return instance;
}

}  // namespace flashroll::tasks
