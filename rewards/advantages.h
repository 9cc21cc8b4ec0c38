// Group-relative advantages (GRPO): each sample's reward is compared with the
// other samples of its own group — the G samples of one task at one effort b.
// Different efforts are never compared, since their length rewards differ by
// design.
//
//   GRPO:     A_i = (r_i - mean(r)) / (std(r) + 1e-6)   (population std)
//   Dr.GRPO:  A_i = r_i - mean(r)                        (no std normalisation,
//             which up-weights groups whose rewards barely differ)
//
// Failed samples (a crashed environment, a deadline: the "repercussion"
// signal) carry no reward the policy earned: they are left out of the mean
// and std and get advantage 0. Whether they reach the trainer at all is the
// job's choice (rewards.failed: exclude | zero_advantage).
//
// Thread safety: plain functions.
#pragma once

#include <span>
#include <vector>

namespace flashroll {

enum class AdvantageMode { kGrpo, kDrGrpo };

struct GroupMember {
  double reward = 0;
  bool failed = false;
};

// One advantage per member, in order. All zero when fewer than one member
// succeeded or the rewards are all equal.
std::vector<double> GroupAdvantages(std::span<const GroupMember> group, AdvantageMode mode);

}  // namespace flashroll
