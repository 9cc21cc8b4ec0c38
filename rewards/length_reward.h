// The effort-conditioned length reward (the report's "controllable reasoning
// effort"): a sample at effort b that reasons for l tokens gets
//
//   r_len = -min(C_max, k(b) * l / L_norm),  k(b) = k0 * exp(-(b - b_min) / tau),
//   tau = lambda * (b_max - b_min).
//
// Low effort makes long reasoning expensive; at b_max the penalty is
// k0 * exp(-1/lambda) per L_norm tokens. b_min and b_max are the effort scale
// (1 and 100), not the efforts one job happens to sample, so the same b means
// the same pressure in every job.
//
// Thread safety: plain functions.
#pragma once

#include <cstdint>

namespace flashroll {

struct LengthRewardParams {
  double k0 = 0.2;
  double c_max = 0.5;
  double l_norm = 1024;
  double lambda = 0.5;
  double b_min = 1;
  double b_max = 100;
  // Which samples pay it: every one (the report's formula), or only those
  // the verifier accepts. With `success_only` a group that fails throughout
  // has equal rewards and teaches nothing, where otherwise its one signal
  // would be "reason less", which a small model follows until it stops
  // solving anything.
  bool success_only = false;
};

// k(b).
double LengthPenaltyScale(const LengthRewardParams& params, double effort);

// r_len for `reasoning_tokens` sampled reasoning tokens at `effort`; <= 0.
double LengthReward(const LengthRewardParams& params, double effort, int64_t reasoning_tokens);

// The length part of a sample's reward: LengthReward, or 0 for a sample the
// verifier rejected when params.success_only.
double SampleLengthReward(const LengthRewardParams& params, double effort, int64_t reasoning_tokens, bool success);

}  // namespace flashroll
