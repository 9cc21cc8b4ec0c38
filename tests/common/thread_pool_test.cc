#include "common/thread_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(ThreadPool, SubmitReturnsResults) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  std::vector<std::future<int>> futures;
  for (int i = 0; i < 100; ++i) futures.push_back(pool.Submit([i] { return i * i; }));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(futures[i].get(), i * i);
}

TEST(ThreadPool, ZeroThreadsMeansHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1u);
}

TEST(ThreadPool, TasksRunOnSeveralThreads) {
  ThreadPool pool(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> started{0};
  std::vector<std::future<void>> futures;
  for (int i = 0; i < 4; ++i) {
    futures.push_back(pool.Submit([&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      // Hold each worker until all four tasks have started.
      ++started;
      while (started.load() < 4) std::this_thread::yield();
    }));
  }
  for (auto& f : futures) f.get();
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
}

TEST(ThreadPool, ExceptionGoesToTheFutureAndPoolKeepsWorking) {
  ThreadPool pool(1);
  auto bad = pool.Submit([]() -> int { throw std::runtime_error("boom"); });
  EXPECT_THROW(bad.get(), std::runtime_error);
  EXPECT_EQ(pool.Submit([] { return 7; }).get(), 7);
}

TEST(ThreadPool, WaitBlocksUntilAllTasksFinish) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    (void)pool.Submit([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++done;
    });
  }
  pool.Wait();
  EXPECT_EQ(done.load(), 20);
}

TEST(ThreadPool, DestructorRunsQueuedTasks) {
  std::atomic<int> done{0};
  std::vector<std::future<void>> futures;
  {
    ThreadPool pool(1);
    for (int i = 0; i < 10; ++i) {
      futures.push_back(pool.Submit([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++done;
      }));
    }
  }
  EXPECT_EQ(done.load(), 10);
  // Every future has its value; none is a broken promise.
  for (auto& f : futures) EXPECT_NO_THROW(f.get());
}

TEST(ThreadPool, ShutdownWithFailedTasksDoesNotThrow) {
  std::future<void> f;
  EXPECT_NO_THROW({
    ThreadPool pool(2);
    f = pool.Submit([] { throw std::logic_error("x"); });
  });
  EXPECT_THROW(f.get(), std::logic_error);
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 7u, 1000u, 12345u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](size_t begin, size_t end) {
      ASSERT_LE(begin, end);
      ASSERT_LE(end, hits.size());
      for (size_t i = begin; i < end; ++i) ++hits[i];
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ParallelForHonoursMinChunk) {
  ThreadPool pool(4);
  std::mutex mu;
  std::vector<std::pair<size_t, size_t>> ranges;
  pool.ParallelFor(
      103,
      [&](size_t begin, size_t end) {
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(begin, end);
      },
      10);
  size_t total = 0;
  size_t short_ranges = 0;
  for (auto [b, e] : ranges) {
    total += e - b;
    if (e - b < 10) ++short_ranges;
  }
  EXPECT_EQ(total, 103u);
  EXPECT_LE(short_ranges, 1u);  // only the last may be short
}

TEST(ThreadPool, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<size_t> sum{0};
  pool.ParallelFor(8, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      pool.ParallelFor(100, [&](size_t b, size_t e) { sum += e - b; });
    }
  });
  EXPECT_EQ(sum.load(), 800u);
}

TEST(ThreadPool, ParallelForRethrowsAfterAllChunksRan) {
  ThreadPool pool(2);
  std::atomic<size_t> covered{0};
  EXPECT_THROW(pool.ParallelFor(
                   100,
                   [&](size_t begin, size_t end) {
                     covered += end - begin;
                     if (begin == 0) throw std::runtime_error("first chunk");
                   },
                   10),
               std::runtime_error);
  EXPECT_EQ(covered.load(), 100u);
  // The pool still works.
  EXPECT_EQ(pool.Submit([] { return 1; }).get(), 1);
}

}  // namespace
}  // namespace flashroll
