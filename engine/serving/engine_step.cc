#include <algorithm>

#include "engine/serving/engine_state.h"

namespace flashroll::engine {

// ---- One step: plan, batch, forward, draw; the loop --------------------

RowDraw Engine::State::PlanDraw(const std::vector<StepScheduler::Item>& plan, const LogitsUse& use) const {
  RowDraw d;
  if (!backend->DrawsOnDevice() || use.position >= 0) return d;
  const Sequence* seq = plan[use.item].seq;
  const GenerationRequest& p = static_cast<const Request*>(seq->owner)->params;
  const int64_t index = static_cast<int64_t>(seq->tokens.size()) - seq->prompt_len;
  if ((index == 0 && seq->choice == 0 && p.n > 1) || !Sampler::DrawsOnDevice(p.sampling)) return d;
  d.on_device = true;
  d.plan = Sampler::PlanDeviceDraw(p.sampling, static_cast<uint64_t>(seq->choice), static_cast<uint64_t>(index));
  return d;
}

int64_t Engine::State::BuildBatch(const std::vector<StepScheduler::Item>& plan, size_t begin, size_t end,
                                  std::vector<LogitsUse>* uses) {
  batch.tokens.clear();
  batch.seqs.clear();
  batch.logit_rows.clear();
  batch.replay_offsets.clear();
  batch.replay_ids.clear();
  bool replaying = false;  // some row replays recorded routing
  int64_t reprefilled = 0;
  for (size_t i = begin; i < end; ++i) {
    Sequence* seq = plan[i].seq;
    const int64_t start = plan[i].start;
    const int64_t n = plan[i].num_tokens;
    const int64_t row0 = static_cast<int64_t>(batch.tokens.size());
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    batch.tokens.insert(batch.tokens.end(), seq->tokens.begin() + start, seq->tokens.begin() + start + n);
    batch.seqs.push_back({start, n, seq->blocks.data()});
    if (plan[i].reprefill) {
      // Recomputed under the new weights, routed afresh, no logits.
      reprefilled += n;
      if (replaying) batch.replay_offsets.insert(batch.replay_offsets.end(), static_cast<size_t>(n), -1);
      continue;
    }
    // Tokens whose routing is already recorded (or given) replay it.
    const int64_t replay_end = std::min(start + n, RoutedTokens(*seq));
    if (replay_end > start && !replaying) {
      replaying = true;
      batch.replay_offsets.assign(static_cast<size_t>(row0), -1);
    }
    if (replaying) {
      for (int64_t p = start; p < start + n; ++p) {
        batch.replay_offsets.push_back(p < replay_end ? static_cast<int64_t>(batch.replay_ids.size()) : -1);
        if (p < replay_end) UnpackRouting(routing, seq->routing, p, &batch.replay_ids);
      }
    }
    if (seq->scoring) {
      for (int64_t p = std::max(seq->computed, seq->prompt_len - 1); p < std::min(seq->computed + n, len - 1); ++p) {
        batch.logit_rows.push_back(row0 + p - seq->computed);
        uses->push_back({i, p});
      }
    } else if (seq->computed + n == len) {
      batch.logit_rows.push_back(row0 + n - 1);
      uses->push_back({i, -1});
    }
  }
  return reprefilled;
}

void Engine::State::Step() {
  std::vector<StepScheduler::Item> plan = scheduler->Schedule();
  if (plan.empty()) return;
  // Sequences pinned to older weights run in forward passes of their own,
  // after the current version's; the kernels are batch-invariant, so the
  // split changes no bit of anyone's logits.
  std::stable_sort(plan.begin(), plan.end(), [](const StepScheduler::Item& a, const StepScheduler::Item& b) {
    return a.seq->pinned_version < b.seq->pinned_version;
  });
  std::vector<LogitsUse> uses;  // what each logits row is for
  int64_t reprefilled = 0;
  Status st = Status::Ok();
  for (size_t begin = 0, end = 0; begin < plan.size() && st.ok(); begin = end) {
    end = begin + 1;
    while (end < plan.size() && plan[end].seq->pinned_version == plan[begin].seq->pinned_version) ++end;
    const size_t first_use = uses.size();
    reprefilled += BuildBatch(plan, begin, end, &uses);
    logits.resize(uses.size() * static_cast<size_t>(vocab));
    draws.resize(uses.size());
    for (size_t k = first_use; k < uses.size(); ++k) draws[k] = PlanDraw(plan, uses[k]);
    if (plan[begin].seq->pinned_version >= 0) backend->SetModel(WeightsOf(*plan[begin].seq));
    std::vector<int32_t>* out = routing.empty() ? nullptr : begin == 0 ? &routed : &group_routed;
    st = backend->ForwardAndDraw(batch, logits.data() + first_use * static_cast<size_t>(vocab), out,
                                 std::span<RowDraw>(draws).subspan(first_use));
    if (out == &group_routed) routed.insert(routed.end(), group_routed.begin(), group_routed.end());
  }
  if (plan.back().seq->pinned_version >= 0) backend->SetModel(*current);  // between steps the backend runs `current`
  int64_t prompt_tokens = 0;
  for (const auto& it : plan) prompt_tokens += it.num_tokens;
  if (!st.ok()) {
    // Inputs were validated at Submit, so this is a bug: end the affected
    // requests rather than retry the same batch forever.
    std::vector<uint64_t> ids;
    for (const auto& it : plan) ids.push_back(static_cast<Request*>(it.seq->owner)->id);
    for (uint64_t id : ids) AbortRequest(id);
    return;
  }
  if (!routing.empty()) RecordRouting(plan);
  int64_t prefilled = 0, recomputed = 0;
  CountPrefill(plan, &prefilled, &recomputed);
  scheduler->Commit(plan);
  int64_t generated = 0;
  std::vector<uint64_t> completed;
  int64_t sampled = 0;
  for (size_t k = 0; k < uses.size(); ++k) {
    Sequence* seq = plan[uses[k].item].seq;
    Request* req = static_cast<Request*>(seq->owner);
    const float* row = &logits[k * static_cast<size_t>(vocab)];
    if (uses[k].position >= 0) {
      const GenerationRequest& p = req->params;
      StreamEvent e;
      e.sequence_id = seq->id;
      e.version = VersionOf(*seq);
      e.has_token = true;
      if (p.score_full_vocab) e.vocab_logprobs.resize(static_cast<size_t>(vocab));
      e.token = sampler->Score(row, p.sampling.temperature, seq->tokens[uses[k].position + 1], p.sampling.top_logprobs,
                               p.score_full_vocab ? e.vocab_logprobs.data() : nullptr);
      Emit(req, std::move(e));
      continue;
    }
    ++sampled;
    const int64_t index = static_cast<int64_t>(seq->tokens.size()) - seq->prompt_len;
    if (draws[k].on_device) {
      Append(req, seq, Sampler::FinishDeviceDraw(draws[k].result, req->params.sampling));
      ++generated;
    } else if (index == 0 && seq->choice == 0) {
      Fork(req, seq, row);
      generated += req->params.n;
    } else {
      std::span<const int32_t> all(seq->tokens);
      Append(req, seq,
             sampler->Sample(row, req->params.sampling, all.first(static_cast<size_t>(seq->prompt_len)),
                             all.subspan(static_cast<size_t>(seq->prompt_len)), static_cast<uint64_t>(seq->choice),
                             static_cast<uint64_t>(index)));
      ++generated;
    }
    if (req->finished == req->params.n) completed.push_back(req->id);
  }
  // Scoring sequences end once every token is computed.
  for (const auto& it : plan) {
    Sequence* seq = it.seq;
    if (!seq->scoring || seq->computed != static_cast<int64_t>(seq->tokens.size())) continue;
    Request* req = static_cast<Request*>(seq->owner);
    StreamEvent e;
    e.sequence_id = seq->id;
    e.finish = FinishReason::kLength;
    Emit(req, std::move(e));
    Retire(req, seq);
    completed.push_back(req->id);
  }
  for (uint64_t id : completed) requests.erase(id);
  std::lock_guard<std::mutex> lock(mu);
  stats.steps++;
  stats.generated_tokens += generated;
  stats.prompt_tokens += prompt_tokens - sampled - reprefilled;
  stats.prefill_tokens += prefilled;
  stats.reprefill_tokens += recomputed;
}

void Engine::State::CountPrefill(const std::vector<StepScheduler::Item>& plan, int64_t* prefill, int64_t* recomputed) {
  for (const StepScheduler::Item& it : plan) {
    Sequence* seq = it.seq;
    // A decode computes the token the sequence sampled last; everything
    // else (prompts, appended tokens, recomputes) is a prefill pass's.
    const bool decode = !it.reprefill && !seq->scoring && it.num_tokens == 1 &&
                        it.start == static_cast<int64_t>(seq->tokens.size()) - 1 && it.start >= seq->prompt_len;
    const int64_t end = it.start + it.num_tokens;
    const int64_t again = it.reprefill ? it.num_tokens : std::max<int64_t>(0, std::min(end, seq->computed_high) - it.start);
    seq->computed_high = std::max(seq->computed_high, end);
    if (decode) continue;
    seq->prefill_tokens += it.num_tokens;
    seq->reprefill_tokens += again;
    *prefill += it.num_tokens;
    *recomputed += again;
  }
}

void Engine::State::RecordRouting(const std::vector<StepScheduler::Item>& plan) {
  const int64_t per_row = routing.TokenIds();
  int64_t row = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence* seq = plan[i].seq;
    for (int64_t p = plan[i].start; p < plan[i].start + plan[i].num_tokens; ++p, ++row) {
      // Positions below the recorded count were computed before (a
      // recompute): their routing stays as first recorded, unless a partial
      // re-prefill routed them afresh.
      if (p == RoutedTokens(*seq)) {
        PackRouting(routing, &routed[row * per_row], &seq->routing);
      } else if (plan[i].reprefill && p < RoutedTokens(*seq)) {
        StoreRouting(routing, p, &routed[row * per_row], &seq->routing);
      }
    }
  }
}

void Engine::State::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] {
        return stop || !inbox.empty() || !cancels.empty() || !tasks.empty() ||
               scheduler->running() + scheduler->waiting() > 0;
      });
      if (stop) break;
      std::deque<std::function<void()>> work;
      work.swap(tasks);
      std::deque<std::unique_ptr<Request>> fresh;
      fresh.swap(inbox);
      std::vector<uint64_t> cancelled;
      cancelled.swap(cancels);
      lock.unlock();
      for (auto& r : fresh) Admit(std::move(r));
      for (uint64_t id : cancelled) CancelRequest(id);
      for (auto& fn : work) fn();
    }
    Step();
    ReleasePinnedWeights();
    std::lock_guard<std::mutex> lock(mu);
    stats.resident_weight_versions = 1 + static_cast<int64_t>(pinned_weights.size());
    stats.waiting = scheduler->waiting();
    stats.running = scheduler->running();
    stats.paused = static_cast<int64_t>(live.size()) - scheduler->running() - scheduler->waiting();
    stats.kv_blocks_used = blocks->used();
    stats.prefix_query_tokens = blocks->query_tokens();
    stats.prefix_hit_tokens = blocks->hit_tokens();
    stats.preemptions = scheduler->preemptions();
  }
  // Abort what is left, including requests never admitted; answer pending calls.
  std::deque<std::unique_ptr<Request>> fresh;
  std::deque<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(mu);
    fresh.swap(inbox);
    work.swap(tasks);
  }
  for (auto& fn : work) fn();
  for (auto& r : fresh) Admit(std::move(r));
  std::vector<uint64_t> ids;
  for (const auto& [id, req] : requests) ids.push_back(id);
  for (uint64_t id : ids) AbortRequest(id);
  for (auto& [id, session] : sessions) {
    if (!session.seq->persisted.empty()) RemoveSequenceFile(std::exchange(session.seq->persisted, std::string()));
  }
  if (waiting_swap) {
    waiting_swap->done->set_value(Status::Unavailable("the engine stopped before weight version " +
                                                  std::to_string(waiting_swap->version) + " could be swapped in"));
    waiting_swap.reset();
  }
}

}  // namespace flashroll::engine
