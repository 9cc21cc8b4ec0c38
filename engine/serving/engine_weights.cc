#include <future>

#include "engine/models/checkpoint.h"
#include "engine/serving/engine_state.h"

namespace flashroll::engine {

// ---- Weight swaps ----------------------------------------------------------

Result<bool> Engine::State::TrySwap(const std::shared_ptr<const Model>& incoming, int64_t next) {
  FR_RETURN_IF_ERROR(WeightLayout::Of(*model).Check(incoming->files()));
  if (next <= version.load()) {
    return Status::FailedPrecondition("weight version " + std::to_string(next) + " is not above the current " +
                                      std::to_string(version.load()));
  }
  std::vector<Sequence*> pinning;  // sequences that stay on the current weights
  for (auto& [id, seq] : live) {
    // A parked session (no request) pins nothing.
    if (seq->pinned_version < 0 && seq->owner != nullptr && static_cast<Request*>(seq->owner)->params.pin_version) {
      pinning.push_back(seq);
    }
  }
  if (!pinning.empty() && !pinned_weights.empty()) return false;  // a third version
  if (!pinning.empty()) pinned_weights[version.load()] = current;
  for (Sequence* seq : pinning) seq->pinned_version = version.load();
  // Between two steps: the next step runs every other sequence on the new weights.
  backend->SetModel(*incoming);
  // KV and routing written so far came from the old weights.
  for (auto& [id, seq] : live) {
    if (seq->computed > 0 || !seq->routing.empty() || !seq->persisted.empty() || seq->pinned_version >= 0) {
      seq->cacheable = false;
    }
  }
  model = incoming.get();
  current = incoming;
  version = next;
  scheduler->set_salt(BlockManager::ChainHash(base_salt, std::span<const int32_t>(), static_cast<uint64_t>(next)));
  scheduler->set_version(next);
  for (auto& [id, seq] : live) PlanReprefill(seq);
  return true;
}

void Engine::State::ReleasePinnedWeights() {
  if (pinned_weights.empty()) return;
  std::map<int64_t, std::shared_ptr<const Model>> used;
  for (const auto& [id, seq] : live) {
    if (seq->pinned_version >= 0) used[seq->pinned_version] = pinned_weights.at(seq->pinned_version);
  }
  pinned_weights.swap(used);
  if (!waiting_swap) return;
  Result<bool> swapped = TrySwap(waiting_swap->model, waiting_swap->version);
  if (swapped.ok() && !*swapped) return;  // still waiting
  waiting_swap->done->set_value(swapped.status());
  waiting_swap.reset();
}

Status Engine::SwapWeights(std::unique_ptr<Model> model, int64_t version) {
  State& s = *state_;
  if (model == nullptr) return Status::InvalidArgument("no model to swap in");
  std::shared_ptr<const Model> incoming(std::move(model));
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.tasks.push_back([&s, incoming, version, done] {
      if (s.waiting_swap) {
        done->set_value(Status::FailedPrecondition("weight version " + std::to_string(s.waiting_swap->version) +
                                                   " is waiting for pinned sequences to end"));
        return;
      }
      Result<bool> swapped = s.TrySwap(incoming, version);
      if (swapped.ok() && !*swapped) {
        s.waiting_swap = State::WaitingSwap{incoming, version, done};
      } else {
        done->set_value(swapped.status());
      }
    });
  }
  s.cv.notify_all();
  return result.get();
}

int64_t Engine::weight_version() const { return state_->version.load(); }

}  // namespace flashroll::engine
