// ThreadPool: a fixed set of worker threads running submitted tasks in FIFO
// order, plus ParallelFor to split an index range across them.
//
// Tasks should not throw; if one does, the exception is stored in its future
// (Submit) or rethrown on the calling thread (ParallelFor) and the pool keeps
// running. The destructor runs every task already queued, then joins the
// workers, so no future is left without a value.
//
// Thread safety: all methods may be called from any thread, including from
// tasks running on the pool. Wait() called from one of the pool's own tasks
// deadlocks (it waits for itself); ParallelFor does not, because the calling
// thread works through the range itself.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace flashroll {

class ThreadPool {
 public:
  // Starts `threads` workers; 0 means one per hardware thread (at least 1).
  explicit ThreadPool(size_t threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  // Runs the queued tasks to completion, then joins the workers.
  ~ThreadPool();

  size_t size() const { return workers_.size(); }

  // Queues `fn` and returns a future for its result (or its exception).
  template <typename F>
  std::future<std::invoke_result_t<std::decay_t<F>>> Submit(F&& fn) {
    using R = std::invoke_result_t<std::decay_t<F>>;
    // packaged_task is move-only and std::function needs a copyable target.
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(fn));
    std::future<R> future = task->get_future();
    Enqueue([task] { (*task)(); });
    return future;
  }

  // Blocks until every task submitted so far (and any they submitted) has
  // finished.
  void Wait();

  // Calls fn(begin, end) over disjoint sub-ranges covering [0, n), on the
  // workers and on the calling thread, and returns when all have finished.
  // Sub-ranges have at least `min_chunk` indices (except the last). If fn
  // throws, the remaining sub-ranges still run and the first exception is
  // rethrown here.
  void ParallelFor(size_t n, const std::function<void(size_t begin, size_t end)>& fn,
                   size_t min_chunk = 1);

 private:
  void Enqueue(std::function<void()> task);
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable work_cv_;          // signalled when a task is queued or on shutdown
  std::condition_variable idle_cv_;          // signalled when the pool may have become idle
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  size_t active_ = 0;                        // guarded by mu_: tasks running now
  bool shutting_down_ = false;               // guarded by mu_

  std::vector<std::thread> workers_;  // constant after construction
};

}  // namespace flashroll
