// The instruction-set paths of the CPU kernels and which one runs.
//
// Every kernel exists three times: a portable scalar path, an AVX2 path
// (AVX2 + FMA + F16C) and an AVX-512 path (F + BW + VL + VNNI, with FMA and
// F16C). The best path the CPU supports is picked at first use through
// __builtin_cpu_supports, which also checks that the OS saves the registers.
// All paths compute the same results up to float rounding: quantised dot
// products are exact integer sums on every path, only the order of float
// accumulation differs.
//
// Thread safety: all functions may be called from any thread. TEST_ForceIsa
// must not race with running kernels (tests call it between kernel calls).
#pragma once

#include "common/status.h"

namespace flashroll::kernels {

enum class Isa { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2", "avx512".
const char* IsaName(Isa isa);

// True when this CPU (and OS) can run the path.
bool IsaSupported(Isa isa);

// The best path this CPU supports.
Isa DetectIsa();

// The path the kernels use now: DetectIsa() unless a test forced another.
Isa ActiveIsa();

// Test hook: makes every kernel use `isa` from now on. Returns
// FailedPrecondition (and changes nothing) when the CPU cannot run it.
Status TEST_ForceIsa(Isa isa);

}  // namespace flashroll::kernels
