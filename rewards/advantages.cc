#include "rewards/advantages.h"

#include <cmath>

namespace flashroll {

std::vector<double> GroupAdvantages(std::span<const GroupMember> group, AdvantageMode mode) {
  std::vector<double> advantages(group.size(), 0.0);
  double sum = 0;
  int counted = 0;
  for (const GroupMember& m : group) {
    if (m.failed) continue;
    sum += m.reward;
    ++counted;
  }
  if (counted == 0) return advantages;
  const double mean = sum / counted;
  double squares = 0;
  for (const GroupMember& m : group) {
    if (!m.failed) squares += (m.reward - mean) * (m.reward - mean);
  }
  const double std_dev = std::sqrt(squares / counted);
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i].failed) continue;
    const double centred = group[i].reward - mean;
    advantages[i] = mode == AdvantageMode::kGrpo ? centred / (std_dev + 1e-6) : centred;
  }
  return advantages;
}

}  // namespace flashroll
