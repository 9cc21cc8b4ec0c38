// TaskRng: a small deterministic generator (SplitMix64) for task instances.
//
// std::uniform_int_distribution is implementation-defined, so the same seed
// would give different tasks under libstdc++ and libc++; task ids must name
// the same instance everywhere, hence our own bounded draws.
//
// Thread safety: none; one TaskRng per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashroll {

class TaskRng {
 public:
  explicit TaskRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [lo, hi]; lo <= hi.
  int64_t Int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(span == 0 ? Next() : Next() % span);
  }

  template <typename T>
  const T& Pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(Int(0, static_cast<int64_t>(items.size()) - 1))];
  }

 private:
  uint64_t state_;
};

}  // namespace flashroll
