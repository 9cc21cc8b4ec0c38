#include "rewards/sample_reward.h"

namespace flashroll {

SampleReward ScoreSample(const LengthRewardParams& params, int effort, int64_t reasoning_tokens, bool success) {
  SampleReward reward;
  reward.verifier = success ? 1.0 : 0.0;
  reward.length = SampleLengthReward(params, effort, reasoning_tokens, success);
  return reward;
}

}  // namespace flashroll
