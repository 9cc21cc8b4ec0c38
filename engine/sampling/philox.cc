#include "engine/sampling/philox.h"

namespace flashroll::engine {
namespace {

constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kRounds = 10;

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  std::array<uint32_t, 4> x = counter;
  std::array<uint32_t, 2> k = key;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * x[0];
    const uint64_t p1 = static_cast<uint64_t>(kMultiplier1) * x[2];
    const auto hi = [](uint64_t p) { return static_cast<uint32_t>(p >> 32); };
    const auto lo = [](uint64_t p) { return static_cast<uint32_t>(p); };
    x = {hi(p1) ^ x[1] ^ k[0], lo(p1), hi(p0) ^ x[3] ^ k[1], lo(p0)};
  }
  return x;
}

double UniformDouble(uint64_t seed, uint64_t stream, uint64_t index) {
  const std::array<uint32_t, 4> x = Philox4x32(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream),
       static_cast<uint32_t>(stream >> 32)},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = (static_cast<uint64_t>(x[1]) << 32) | x[0];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace flashroll::engine
