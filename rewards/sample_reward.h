// A sample's reward: the verifier's 1 (accepted) or 0 plus the
// effort-conditioned length term (length_reward.h), kept as its parts, which
// the store records beside the sum.
//
// Thread safety: plain functions.
#pragma once

#include <cstdint>

#include "rewards/length_reward.h"

namespace flashroll {

struct SampleReward {
  double verifier = 0;  // 1 when the verifier accepted the answer
  double length = 0;    // SampleLengthReward, <= 0
  double total() const { return verifier + length; }
};

// The reward of a sample at `effort` that reasoned for `reasoning_tokens`
// tokens and that the verifier accepted (`success`) or not.
SampleReward ScoreSample(const LengthRewardParams& params, int effort, int64_t reasoning_tokens, bool success);

}  // namespace flashroll
