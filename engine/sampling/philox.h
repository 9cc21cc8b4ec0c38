// Philox4x32-10: a counter-based random number generator (Salmon, Moraes,
// Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011),
// written here from the published algorithm; it reproduces Random123's
// philox4x32-10 known-answer vectors.
//
// A counter-based generator has no state: the output is a pure function of a
// 128-bit counter and a 64-bit key, so the draw for (request seed, choice,
// token) can be computed directly, in any order, on any thread, and is the
// same every time. This is what makes seeded sampling reproducible whatever
// the batch a sequence runs in.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>

namespace flashroll::engine {

// The 4 x 32-bit output block of Philox4x32 with 10 rounds for `counter`
// (c0 is the least significant word) under `key`. Each round multiplies by
// 0xD2511F53 and 0xCD9E8D57; the key is bumped by 0x9E3779B9 and 0xBB67AE85
// between rounds.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A uniform double in [0, 1) with 53 random bits, a pure function of its
// arguments. Layout: key = {low 32 bits of seed, high 32 bits of seed};
// counter = {low, high 32 bits of index, low, high 32 bits of stream}; of
// the output block x, the 64-bit word (x[1] << 32 | x[0]) is taken and its
// top 53 bits scaled by 2^-53. Distinct (stream, index) pairs under one seed
// are distinct counters, hence independent draws.
double UniformDouble(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace flashroll::engine
