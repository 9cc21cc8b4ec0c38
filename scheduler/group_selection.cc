#include "scheduler/group_selection.h"

namespace flashroll {

DynamicSampling ParseDynamicSampling(const std::string& name) {
  if (name == "reward") return DynamicSampling::kReward;
  if (name == "verifier") return DynamicSampling::kVerifier;
  return DynamicSampling::kNone;
}

bool IsZeroVariance(DynamicSampling mode, std::span<const GroupSampleOutcome> group) {
  if (mode == DynamicSampling::kNone) return false;
  const GroupSampleOutcome* first = nullptr;
  for (const GroupSampleOutcome& s : group) {
    if (s.failed) continue;
    if (first == nullptr) {
      first = &s;
      continue;
    }
    const bool differs = mode == DynamicSampling::kReward ? s.reward != first->reward : s.success != first->success;
    if (differs) return false;
  }
  return true;
}

bool PassRateSelector::Accept(const TaskCell& cell) {
  if (!selection_.enabled) return true;
  CellState& state = cells_[cell];
  const auto n = static_cast<int64_t>(state.recent.size());
  bool open = n < selection_.min_samples;
  if (!open) {
    const double rate = static_cast<double>(state.successes) / static_cast<double>(n);
    open = rate > selection_.min_pass_rate && rate < selection_.max_pass_rate;
  }
  if (!open && ++state.refused >= selection_.probe_every) open = true;
  if (open) state.refused = 0;
  return open;
}

void PassRateSelector::Record(const TaskCell& cell, int64_t successes, int64_t samples) {
  CellState& state = cells_[cell];
  for (int64_t i = 0; i < samples; ++i) {
    const bool success = i < successes;
    state.recent.push_back(success);
    state.successes += success ? 1 : 0;
    if (static_cast<int64_t>(state.recent.size()) > selection_.window) {
      state.successes -= state.recent.front() ? 1 : 0;
      state.recent.pop_front();
    }
  }
}

std::pair<double, int64_t> PassRateSelector::Rate(const TaskCell& cell) const {
  const auto it = cells_.find(cell);
  if (it == cells_.end() || it->second.recent.empty()) return {0.0, 0};
  const auto n = static_cast<int64_t>(it->second.recent.size());
  return {static_cast<double>(it->second.successes) / static_cast<double>(n), n};
}

}  // namespace flashroll
