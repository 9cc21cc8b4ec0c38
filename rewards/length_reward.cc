#include "rewards/length_reward.h"

#include <algorithm>
#include <cmath>

namespace flashroll {

double LengthPenaltyScale(const LengthRewardParams& params, double effort) {
  const double tau = params.lambda * (params.b_max - params.b_min);
  return params.k0 * std::exp(-(effort - params.b_min) / tau);
}

double LengthReward(const LengthRewardParams& params, double effort, int64_t reasoning_tokens) {
  const double penalty =
      LengthPenaltyScale(params, effort) * static_cast<double>(reasoning_tokens) / params.l_norm;
  return -std::min(params.c_max, penalty);
}

double SampleLengthReward(const LengthRewardParams& params, double effort, int64_t reasoning_tokens, bool success) {
  if (params.success_only && !success) return 0.0;
  return LengthReward(params, effort, reasoning_tokens);
}

}  // namespace flashroll
