#include "engine/serving/benchmark_inputs.h"

#include <algorithm>

namespace flashroll::engine {

std::vector<int32_t> PseudoRandomPrompt(int64_t len, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& t : p) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return p;
}

double UpperMedian(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace flashroll::engine
