#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace flashroll {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kReflectedPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

// Both paths work on the inverted register; the callers invert on the way in and out.
uint32_t UpdatePortable(uint32_t c, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t UpdateSse42(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (kHaveSse42) return ~UpdateSse42(~crc, p, n);
#endif
  return ~UpdatePortable(~crc, p, n);
}

uint32_t TEST_Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~UpdatePortable(~crc, static_cast<const uint8_t*>(data), n);
}

}  // namespace flashroll
