// TrainingGroup: what the trainer receives — one complete GRPO group of G
// samples of one task at one reasoning effort, each sample a token sequence
// with per-token logprobs, policy versions and loss mask, its reward (and
// the parts it is made of) and its group-relative advantage.
//
// Per-token arrays are aligned with `tokens`: environment and prompt tokens
// have logprob 0, version -1 and mask 0; sampled tokens carry the raw
// logprob log_softmax(logits / T) the engine recorded, the weight version
// that produced them, and mask 1 (0 when the scheduler masked them as too
// stale).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flashroll {

struct TrainingSample {
  int64_t sample_id = 0;
  std::vector<int32_t> tokens;    // the whole conversation, prompt included
  std::vector<float> logprobs;    // per token
  std::vector<int32_t> versions;  // per token; -1 where not sampled
  std::vector<uint8_t> loss_mask; // per token
  int64_t prompt_tokens = 0;      // the leading tokens before the first sampled one
  double reward = 0;
  std::map<std::string, double> reward_parts;  // e.g. "verifier", "length"
  double advantage = 0;
  int64_t reasoning_tokens = 0;
  std::string status = "completed";  // "completed" or "failed" (repercussion)
  bool success = false;
};

struct TrainingGroup {
  int64_t group_id = 0;
  int64_t task_id = 0;
  std::string task_key;  // the task's id, e.g. "arithmetic-17"
  int effort = 100;
  std::vector<TrainingSample> samples;
};

}  // namespace flashroll
