#include "engine/kernels/cpu_isa.h"

#include <atomic>
#include <string>

#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels {
namespace {

bool CpuHasAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

const internal::KernelTable& TableFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return internal::Avx512KernelTable();
    case Isa::kAvx2: return internal::Avx2KernelTable();
    case Isa::kScalar: break;
  }
  return internal::ScalarKernelTable();
}

// -1 until first use; then the Isa value in force.
std::atomic<int> g_active{-1};

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return CpuHasAvx2();
    case Isa::kAvx512: return CpuHasAvx512();
  }
  return false;
}

Isa DetectIsa() {
  if (CpuHasAvx512()) return Isa::kAvx512;
  if (CpuHasAvx2()) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa ActiveIsa() {
  int v = g_active.load(std::memory_order_acquire);
  if (v < 0) {
    int expected = -1;
    g_active.compare_exchange_strong(expected, static_cast<int>(DetectIsa()), std::memory_order_acq_rel);
    v = g_active.load(std::memory_order_acquire);
  }
  return static_cast<Isa>(v);
}

Status TEST_ForceIsa(Isa isa) {
  if (!IsaSupported(isa)) {
    return Status::FailedPrecondition(std::string("this CPU cannot run the ") + IsaName(isa) + " kernels");
  }
  g_active.store(static_cast<int>(isa), std::memory_order_release);
  return Status::Ok();
}

namespace internal {

const KernelTable& ActiveKernels() { return TableFor(ActiveIsa()); }

}  // namespace internal
}  // namespace flashroll::kernels
