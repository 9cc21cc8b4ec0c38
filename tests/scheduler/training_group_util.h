// Test helpers shared by the BatchQueue, batch format and TrainerApi tests:
// groups with every field set, a field-by-field comparison, and a clock the
// test moves by hand.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/batch_queue.h"
#include "scheduler/training_batch.h"

namespace flashroll::scheduler_test {

// A group whose every field (and every per-token array) differs with `id`,
// so that a swapped or dropped field shows up in a comparison.
inline TrainingGroup MakeGroup(int64_t id, int samples = 2) {
  TrainingGroup g;
  g.group_id = id;
  g.task_id = 1000 + id;
  g.task_key = "arithmetic-" + std::to_string(id);
  g.effort = 50 + static_cast<int>(id);
  for (int i = 0; i < samples; ++i) {
    TrainingSample s;
    s.sample_id = id * 100 + i;
    const int n = 3 + i;  // samples of different lengths exercise the padding
    for (int t = 0; t < n; ++t) {
      const bool sampled = t >= 2;
      s.tokens.push_back(static_cast<int32_t>(id * 1000 + i * 10 + t));
      s.logprobs.push_back(sampled ? -0.125f * static_cast<float>(t + i) : 0.0f);
      s.versions.push_back(sampled ? static_cast<int32_t>(id + t) : -1);
      s.loss_mask.push_back(sampled ? 1 : 0);
    }
    s.prompt_tokens = 2;
    s.reward = 0.5 + static_cast<double>(i);
    s.reward_parts = {{"verifier", 1.0 + static_cast<double>(i)}, {"length", -0.5}};
    s.advantage = 0.25 - static_cast<double>(i);
    s.reasoning_tokens = 7 + i;
    s.status = i == 0 ? "completed" : "failed";
    s.success = i == 0;
    g.samples.push_back(s);
  }
  return g;
}

inline void ExpectSameGroup(const TrainingGroup& a, const TrainingGroup& b) {
  EXPECT_EQ(a.group_id, b.group_id);
  EXPECT_EQ(a.task_id, b.task_id);
  EXPECT_EQ(a.task_key, b.task_key);
  EXPECT_EQ(a.effort, b.effort);
  ASSERT_EQ(a.samples.size(), b.samples.size()) << "group " << a.group_id;
  for (size_t i = 0; i < a.samples.size(); ++i) {
    SCOPED_TRACE("group " + std::to_string(a.group_id) + " sample " + std::to_string(i));
    const TrainingSample& x = a.samples[i];
    const TrainingSample& y = b.samples[i];
    EXPECT_EQ(x.sample_id, y.sample_id);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.logprobs, y.logprobs);
    EXPECT_EQ(x.versions, y.versions);
    EXPECT_EQ(x.loss_mask, y.loss_mask);
    EXPECT_EQ(x.prompt_tokens, y.prompt_tokens);
    EXPECT_EQ(x.reward, y.reward);
    EXPECT_EQ(x.reward_parts, y.reward_parts);
    EXPECT_EQ(x.advantage, y.advantage);
    EXPECT_EQ(x.reasoning_tokens, y.reasoning_tokens);
    EXPECT_EQ(x.status, y.status);
    EXPECT_EQ(x.success, y.success);
  }
}

inline std::vector<int64_t> GroupIds(const std::vector<TrainingGroup>& groups) {
  std::vector<int64_t> ids;
  for (const TrainingGroup& g : groups) ids.push_back(g.group_id);
  return ids;
}

// Starts at 1'700'000'000'000 ms after the epoch: 2023-11-14T22:13:20.000Z.
class FakeClock {
 public:
  static constexpr int64_t kStartMs = 1'700'000'000'000;

  LeaseClock AsFunction() {
    return [this] { return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms_.load())); };
  }
  void Advance(std::chrono::milliseconds d) { ms_.fetch_add(d.count()); }

 private:
  std::atomic<int64_t> ms_{kStartMs};
};

}  // namespace flashroll::scheduler_test
