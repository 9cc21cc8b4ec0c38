// The kernels' worker pool: a few persistent threads that split the output
// rows of a matrix multiply with the calling thread.
//
// Threads are created by SetThreads (or on first use, two in total) and live
// until the next SetThreads or process exit; no call creates a thread. After
// a job, workers spin briefly (so the next matmul of a forward pass starts
// without a wake-up) and then sleep on a futex.
//
// Thread safety: all functions may be called from any thread. Concurrent
// ParallelFor calls run one after the other; a ParallelFor must not be
// called from inside a task of another.
#pragma once

#include <cstdint>
#include <type_traits>

namespace flashroll::kernels {

// Sets the number of threads that run kernels, the caller included: n - 1
// workers are kept. n < 1 is treated as 1. Waits for a running job to end.
void SetThreads(int n);

// The number of threads (caller included) that run kernels.
int Threads();

namespace internal {
void RunParallel(int64_t num_tasks, void (*fn)(void* ctx, int64_t task), void* ctx);
}  // namespace internal

// Calls fn(task) for every task in [0, num_tasks), spread over the caller and
// the workers; returns when all calls have returned.
template <typename Fn>
void ParallelFor(int64_t num_tasks, Fn&& fn) {
  internal::RunParallel(
      num_tasks, [](void* ctx, int64_t task) { (*static_cast<std::remove_reference_t<Fn>*>(ctx))(task); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace flashroll::kernels
