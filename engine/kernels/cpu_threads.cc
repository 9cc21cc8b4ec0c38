#include "engine/kernels/cpu_threads.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace flashroll::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long an idle worker polls for the next job before it sleeps. Covers the
// gap between two matmuls of a forward pass (norms, attention), so decode
// steps pay no futex wake-up, while an idle engine costs no CPU.
constexpr std::chrono::microseconds kSpin{200};

// Job protocol. Run publishes the job (fn_, ctx_, num_tasks_, next_), opens
// it in job_state_ and bumps generation_ to wake the workers. A worker joins
// by incrementing the active count in job_state_, which only succeeds while
// the job of the generation it saw is still open. After the caller has
// claimed the last task itself it closes the job and waits only for the
// workers that joined: a worker that was descheduled or asleep never holds
// up a call (this matters on 2 vCPUs shared with sandboxes), and one that
// wakes late finds the job closed and never touches its fields.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) { Start(threads); }
  ~WorkerPool() { Stop(); }

  void Resize(int threads) {
    std::lock_guard<std::mutex> lock(run_mu_);
    Stop();
    Start(threads);
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void Run(int64_t num_tasks, void (*fn)(void*, int64_t), void* ctx) {
    if (num_tasks <= 0) return;
    std::lock_guard<std::mutex> lock(run_mu_);
    if (workers_.empty() || num_tasks == 1) {
      for (int64_t i = 0; i < num_tasks; ++i) fn(ctx, i);
      return;
    }
    fn_ = fn;
    ctx_ = ctx;
    num_tasks_ = num_tasks;
    next_.store(0, std::memory_order_relaxed);
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    job_state_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
    generation_.notify_all();
    RunTasks();
    const uint64_t state = job_state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
    if ((state & kActiveMask) == 0) return;
    // Joined workers are finishing their last task.
    WaitUntil([&] { return (job_state_.load(std::memory_order_acquire) & kActiveMask) == 0; },
              [&] {
                const uint64_t s = job_state_.load(std::memory_order_acquire);
                if ((s & kActiveMask) != 0) job_state_.wait(s, std::memory_order_acquire);
              });
  }

 private:
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kActiveMask = kClosed - 1;

  template <typename Done, typename Sleep>
  static void WaitUntil(Done done, Sleep sleep) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (done()) return;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) break;
      CpuRelax();
    }
    while (!done()) sleep();
  }

  void Start(int threads) {
    stop_.store(false, std::memory_order_relaxed);
    const uint32_t gen = generation_.load(std::memory_order_relaxed);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, gen] { WorkerLoop(gen); });
    threads_.store(threads, std::memory_order_relaxed);
  }

  // Caller holds run_mu_ (or is the destructor), so no job is open.
  void Stop() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  void RunTasks() {
    for (;;) {
      const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= num_tasks_) return;
      fn_(ctx_, i);
    }
  }

  // Joins the open job of generation `gen`; false if it is closed or gone.
  bool Join(uint32_t gen) {
    uint64_t s = job_state_.load(std::memory_order_acquire);
    for (;;) {
      if ((s >> 32) != gen || (s & kClosed) != 0) return false;
      if (job_state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
  }

  void WorkerLoop(uint32_t seen) {
    for (;;) {
      WaitUntil([&] { return generation_.load(std::memory_order_acquire) != seen; },
                [&] { generation_.wait(seen, std::memory_order_acquire); });
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (!Join(seen)) continue;
      RunTasks();
      const uint64_t after = job_state_.fetch_sub(1, std::memory_order_acq_rel) - 1;
      if ((after & kActiveMask) == 0 && (after & kClosed) != 0) job_state_.notify_all();
    }
  }

  std::mutex run_mu_;  // one job (or resize) at a time
  std::vector<std::thread> workers_;
  // The current job; written by Run before the job opens (release), read by
  // workers after they joined it (acquire).
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0};  // next task index to claim
  // Generation of the current job (high 32 bits), closed flag (bit 31),
  // workers that joined and have not finished (low bits).
  std::atomic<uint64_t> job_state_{0};
  std::atomic<uint32_t> generation_{0};  // bumped per job and on stop; workers wait on it
  std::atomic<bool> stop_{false};
  std::atomic<int> threads_{1};  // workers_.size() + 1, readable without run_mu_
};

WorkerPool& Pool() {
  static WorkerPool pool(2);
  return pool;
}

}  // namespace

void SetThreads(int n) { Pool().Resize(n < 1 ? 1 : n); }

int Threads() { return Pool().threads(); }

namespace internal {

void RunParallel(int64_t num_tasks, void (*fn)(void* ctx, int64_t task), void* ctx) {
  Pool().Run(num_tasks, fn, ctx);
}

}  // namespace internal
}  // namespace flashroll::kernels
