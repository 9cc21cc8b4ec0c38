#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>

namespace flashroll {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::Enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return shutting_down_ || !queue_.empty(); });
      // Shutdown drains the queue first, so every future gets its value.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++active_;
    }
    // Every queued callable catches its own exceptions (packaged_task or
    // ParallelFor's runner), so a throwing task cannot kill the worker.
    task();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
      if (queue_.empty() && active_ == 0) idle_cv_.notify_all();
    }
  }
}

void ThreadPool::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && active_ == 0; });
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn,
                             size_t min_chunk) {
  if (n == 0) return;
  // About four chunks per participant balances uneven work without making
  // chunks so small that claiming them dominates.
  size_t participants = size() + 1;
  size_t chunk = std::max<size_t>({min_chunk, 1, (n + participants * 4 - 1) / (participants * 4)});

  struct State {
    size_t n;
    size_t chunk;
    size_t chunks;
    const std::function<void(size_t, size_t)>* fn;
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;           // guarded by mu
    std::exception_ptr error;  // guarded by mu: the first exception thrown by fn
  };
  auto state = std::make_shared<State>();
  state->n = n;
  state->chunk = chunk;
  state->chunks = (n + chunk - 1) / chunk;
  state->fn = &fn;

  // Claims chunks until none are left. A helper that starts after the caller
  // has returned claims nothing and so never touches fn.
  auto run = [state] {
    for (;;) {
      size_t c = state->next.fetch_add(1);
      if (c >= state->chunks) return;
      size_t begin = c * state->chunk;
      size_t end = std::min(state->n, begin + state->chunk);
      std::exception_ptr error;
      try {
        (*state->fn)(begin, end);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(state->mu);
      if (error && !state->error) state->error = error;
      if (++state->done == state->chunks) state->cv.notify_all();
    }
  };

  size_t helpers = std::min(size(), state->chunks - 1);
  for (size_t i = 0; i < helpers; ++i) Enqueue(run);
  run();

  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done == state->chunks; });
  if (state->error) std::rethrow_exception(state->error);
}

}  // namespace flashroll
