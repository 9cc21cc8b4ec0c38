#include "scheduler/sample_scheduler.h"

#include <algorithm>

namespace flashroll {

SampleScheduler::SampleScheduler(SchedulerPolicy policy, std::vector<GroupPlan> groups, Clock::time_point start)
    : policy_(std::move(policy)), plan_(std::move(groups)), refilled_(start) {
  // Buckets start full enough for one group, so every family can start at once.
  for (const auto& [family, rate] : policy_.rate_limits) buckets_[family] = static_cast<double>(policy_.group_size);
  // Groups a resumed job already finished never open again.
  std::erase_if(plan_, [&](const GroupPlan& g) {
    if (g.missing(policy_.group_size) > 0) return false;
    ++groups_finished_;
    return true;
  });
  total_groups_ = groups_finished_ + static_cast<int64_t>(plan_.size());
}

void SampleScheduler::Refill(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - refilled_).count();
  if (seconds <= 0) return;
  refilled_ = now;
  for (auto& [family, tokens] : buckets_) {
    tokens = std::min(static_cast<double>(policy_.group_size), tokens + seconds * policy_.rate_limits[family]);
  }
}

bool SampleScheduler::RoomForAGroup(const GroupPlan& group) const {
  const int64_t g = group.missing(policy_.group_size);
  if (in_flight_ + static_cast<int64_t>(ready_.size()) + g > policy_.max_in_flight) return false;
  return !policy_.staleness_gate || opened_ + 1 <= GateLimit();
}

int64_t SampleScheduler::GateLimit() const {
  return consumed_ + unqueued_ + (policy_.max_staleness + 1) * policy_.batch_groups;
}

std::string SampleScheduler::WaitReason() const {
  std::string reason = std::to_string(groups_finished_) + "/" + std::to_string(total_groups_) +
                       " groups finished, " + std::to_string(opened_) + " opened, " + std::to_string(in_flight_) +
                       " samples in flight, " + std::to_string(ready_.size()) + " ready";
  if (!policy_.staleness_gate) return reason + "; no staleness gate";
  return reason + "; the staleness gate opens a group while opened + 1 <= consumed " + std::to_string(consumed_) +
         " + unqueued " + std::to_string(unqueued_) + " + (max_staleness " + std::to_string(policy_.max_staleness) +
         " + 1) x batch_groups " + std::to_string(policy_.batch_groups) + " = " + std::to_string(GateLimit()) +
         (opened_ + 1 <= GateLimit() ? " (open)" : " (closed: waiting for the trainer to consume)");
}

bool SampleScheduler::GroupMayOpen(const GroupPlan& group, Clock::time_point now) {
  if (task_in_flight_[group.task_index] + group.missing(policy_.group_size) > policy_.max_per_task) return false;
  if (auto bucket = buckets_.find(group.family); bucket != buckets_.end()) {
    Refill(now);
    if (bucket->second < static_cast<double>(policy_.group_size)) return false;
  }
  return true;
}

std::optional<SampleTicket> SampleScheduler::Next(Clock::time_point now) {
  // Synchronous rounds open as many groups as fit, then nothing until all
  // of them finished; asynchronous dispatch opens one group per call, the
  // first in plan order whose task and family allow it (a capped task or a
  // rate-limited family waits while the others go on).
  const bool may_open = ready_.empty() && (!policy_.synchronous || round_open_ == 0);
  for (size_t i = next_group_; may_open && i < plan_.size() && RoomForAGroup(plan_[i]); ++i) {
    if (!GroupMayOpen(plan_[i], now)) continue;
    if (policy_.select && plan_[i].slots_done.empty() && !policy_.select(plan_[i])) {
      plan_.erase(plan_.begin() + static_cast<std::ptrdiff_t>(i--));
      --total_groups_;
      ++deselected_;
      continue;
    }
    std::rotate(plan_.begin() + static_cast<std::ptrdiff_t>(next_group_), plan_.begin() + static_cast<std::ptrdiff_t>(i),
                plan_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    const GroupPlan& group = plan_[next_group_++];
    if (auto bucket = buckets_.find(group.family); bucket != buckets_.end()) {
      bucket->second -= static_cast<double>(policy_.group_size);
    }
    open_[group.group_id] = {group.task_index, static_cast<int>(group.slots_done.size())};
    for (int slot = 0; slot < policy_.group_size; ++slot) {
      if (!group.slots_done.count(slot)) ready_.push_back({group.group_id, group.task_index, group.effort, slot, 0});
    }
    task_in_flight_[group.task_index] += group.missing(policy_.group_size);
    ++opened_;
    if (!policy_.synchronous) break;
    ++round_open_;
  }
  if (ready_.empty()) return std::nullopt;
  SampleTicket ticket = ready_.front();
  ready_.erase(ready_.begin());
  ++in_flight_;
  return ticket;
}

bool SampleScheduler::Finish(const SampleTicket& ticket, int64_t generated_tokens, bool failed, bool infra) {
  --in_flight_;
  if (infra && ticket.infra_attempt < policy_.infra_retries) {
    // Not the agent's outcome: the slot runs again, first in line.
    ++infra_retried_;
    SampleTicket again = ticket;
    again.attempt += 1;
    again.infra_attempt += 1;
    ready_.insert(ready_.begin(), again);
    return false;
  }
  if (infra && quarantined_.insert(ticket.task_index).second) {
    // Its environment keeps failing: the groups of the task not opened yet
    // never will.
    const auto first = plan_.begin() + static_cast<std::ptrdiff_t>(next_group_);
    const auto kept = std::remove_if(first, plan_.end(), [&](const GroupPlan& g) { return g.task_index == ticket.task_index; });
    const auto removed = static_cast<int64_t>(plan_.end() - kept);
    plan_.erase(kept, plan_.end());
    total_groups_ -= removed;
    groups_quarantined_ += removed;
  }
  ++samples_finished_;
  if (!failed && samples_finished_ <= policy_.warmup_samples && generated_tokens < policy_.warmup_min_tokens) {
    ++dropped_;
    SampleTicket again = ticket;
    again.attempt += 1;
    ready_.insert(ready_.begin(), again);
    return false;
  }
  OpenGroup& group = open_[ticket.group_id];
  --task_in_flight_[ticket.task_index];
  if (++group.finished == policy_.group_size) {
    open_.erase(ticket.group_id);
    finished_.push_back(ticket.group_id);
    ++groups_finished_;
    if (policy_.synchronous) --round_open_;
  }
  return true;
}

std::vector<int64_t> SampleScheduler::TakeFinishedGroups() {
  std::vector<int64_t> out;
  out.swap(finished_);
  return out;
}

std::vector<uint8_t> SampleScheduler::LossMask(std::span<const int32_t> versions, int64_t current_version,
                                               int64_t max_staleness) {
  std::vector<uint8_t> mask(versions.size(), 0);
  for (size_t i = 0; i < versions.size(); ++i) {
    mask[i] = versions[i] >= 0 && current_version - versions[i] <= max_staleness ? 1 : 0;
  }
  return mask;
}

}  // namespace flashroll
