// Full-size variants of slow tests. `make test` runs every test at a size
// that keeps the suite (and CI) short; `make test-slow` sets
// FLASHROLL_SLOW_TESTS=1 and the same tests run at the size that gives
// their guarantee its weight (many thousand cycles, many crash trials).
// docs/TESTING.md lists which tests scale and by how much.
#pragma once

#include <cstdlib>
#include <cstring>

namespace flashroll::testing_support {

inline bool SlowTests() {
  const char* value = std::getenv("FLASHROLL_SLOW_TESTS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// `fast` under `make test`, `slow` under `make test-slow`.
inline int FastOrSlow(int fast, int slow) { return SlowTests() ? slow : fast; }

}  // namespace flashroll::testing_support
