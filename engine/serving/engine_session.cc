// Sessions: one sequence per agent episode, parked between turns with its
// KV blocks and routing, appended to, and run again (engine.h).
#include <algorithm>
#include <future>

#include "engine/serving/engine_state.h"

namespace flashroll::engine {

namespace {

std::string Named(uint64_t session) { return "session " + std::to_string(session); }

}  // namespace

void Engine::State::Park(Request* req, Sequence* seq) {
  scheduler->Pause(seq);  // out of the batch; its blocks stay
  seq->owner = nullptr;
  Session& session = sessions.at(seq->id);
  for (auto& owned : req->seqs) {
    if (owned.get() == seq) session.seq = std::move(owned);
  }
  session.turn = 0;
  session.parked_at = next_park++;
  req->done[seq->choice] = true;
  ++req->finished;
}

bool Engine::State::ReclaimParked() {
  Session* oldest = nullptr;
  for (auto& [id, session] : sessions) {
    if (session.seq == nullptr || session.seq->blocks.empty()) continue;
    if (oldest == nullptr || session.parked_at < oldest->parked_at) oldest = &session;
  }
  if (oldest == nullptr) return false;
  // Its full blocks stay known to the prefix cache until evicted, so the
  // next turn finds what is left of them; the rest it computes again.
  scheduler->ReleaseBlocks(oldest->seq.get());
  return true;
}

Result<uint64_t> Engine::OpenSession() {
  uint64_t id = 0;
  FR_RETURN_IF_ERROR(RunOnLoop([this, &id]() -> Status {
    State& s = *state_;
    auto seq = std::make_unique<Sequence>();
    seq->id = s.next_sequence_id++;
    seq->arrival = s.next_arrival++;
    seq->in_session = true;
    seq->paused = true;  // in no scheduler list until its first turn
    id = seq->id;
    s.live[id] = seq.get();
    State::Session& session = s.sessions[id];
    session.seq = std::move(seq);
    session.parked_at = s.next_park++;
    return Status::Ok();
  }));
  return id;
}

Status Engine::AppendToSession(uint64_t session, std::vector<int32_t> tokens) {
  State& s = *state_;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= s.vocab) {
      return Status::InvalidArgument("token_ids: token " + std::to_string(tokens[i]) + " at position " +
                                     std::to_string(i) + " is outside the vocabulary of " + std::to_string(s.vocab));
    }
  }
  return RunOnLoop([&]() -> Status {
    auto it = s.sessions.find(session);
    if (it == s.sessions.end()) return Status::NotFound(Named(session) + " does not exist");
    State::Session& slot = it->second;
    if (!slot.failed.ok()) return Status::FailedPrecondition(Named(session) + " failed: " + slot.failed.message());
    if (slot.turn != 0) return Status::FailedPrecondition(Named(session) + " is generating; append after its turn ends");
    Sequence* seq = slot.seq.get();
    const int64_t total = static_cast<int64_t>(seq->tokens.size() + tokens.size());
    const int64_t pool_tokens = s.blocks->num_blocks() * s.options.block_size;
    if (total > std::min(s.max_model_len, pool_tokens)) {
      return Status::InvalidArgument(Named(session) + ": " + std::to_string(total) + " tokens exceed the context of " +
                                     std::to_string(std::min(s.max_model_len, pool_tokens)) + " tokens");
    }
    seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
    return Status::Ok();
  });
}

Result<std::shared_ptr<RequestStream>> Engine::GenerateInSession(uint64_t session, GenerationRequest turn) {
  State& s = *state_;
  if (!turn.prompt.empty()) return Status::InvalidArgument("prompt: a session's turn continues its tokens; append them first");
  if (turn.n != 1) return Status::InvalidArgument("n: a session's turn takes n = 1");
  if (!turn.score_tokens.empty() || !turn.score_routing.empty()) {
    return Status::InvalidArgument("token_ids: a session's turn generates; score with a request of its own");
  }
  if (turn.pin_version) return Status::InvalidArgument("pin_version: a session moves to new weights at each swap");
  if (turn.max_tokens < 0) {
    return Status::InvalidArgument("max_tokens: must not be negative, got " + std::to_string(turn.max_tokens));
  }
  FR_RETURN_IF_ERROR(ValidateSamplingParams(turn.sampling));
  if (!turn.stop_strings.empty() && s.tokenizer == nullptr) {
    return Status::InvalidArgument("stop: stop strings need the model's tokenizer");
  }
  for (const std::string& stop : turn.stop_strings) {
    if (stop.empty()) return Status::InvalidArgument("stop: a stop string is empty");
  }
  if ((turn.return_routing || turn.return_prompt_routing) && s.routing.empty()) {
    return Status::InvalidArgument(std::string(turn.return_routing ? "return_routing" : "return_prompt_routing") +
                                   ": the model has no MoE layers, so no routing");
  }
  std::shared_ptr<RequestStream> stream;
  FR_RETURN_IF_ERROR(RunOnLoop([&]() -> Status {
    auto it = s.sessions.find(session);
    if (it == s.sessions.end()) return Status::NotFound(Named(session) + " does not exist");
    State::Session& slot = it->second;
    if (!slot.failed.ok()) return Status::FailedPrecondition(Named(session) + " failed: " + slot.failed.message());
    if (slot.turn != 0) return Status::FailedPrecondition(Named(session) + " is generating already");
    Sequence* seq = slot.seq.get();
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    if (len == 0) return Status::InvalidArgument("prompt: " + Named(session) + " holds no tokens; append some first");
    const int64_t pool_tokens = s.blocks->num_blocks() * s.options.block_size;
    const int64_t context = std::min(s.max_model_len, pool_tokens);
    if (len + turn.max_tokens > context) {
      return Status::InvalidArgument(Named(session) + ": " + std::to_string(len) + " tokens + max_tokens " +
                                     std::to_string(turn.max_tokens) + " exceeds the context of " +
                                     std::to_string(context) + " tokens");
    }
    auto req = std::make_unique<Request>();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      req->id = s.next_id++;
    }
    req->params = std::move(turn);
    stream.reset(new RequestStream(this, req->id, 1));
    req->stream = stream;
    req->text.resize(1);
    req->done.assign(1, false);
    for (const std::string& stop : req->params.stop_strings) req->max_stop_bytes = std::max(req->max_stop_bytes, stop.size());
    Request* r = req.get();
    s.requests[r->id] = std::move(req);
    // The turn's sampling counts from here, as a request with the whole
    // conversation as its prompt would.
    seq->prompt_len = len;
    seq->owner = r;
    slot.turn = r->id;
    r->seqs.push_back(std::move(slot.seq));
    if (r->params.max_tokens == 0) {
      StreamEvent e;
      e.sequence_id = seq->id;
      e.finish = FinishReason::kLength;
      s.Emit(r, std::move(e));
      s.Park(r, seq);
      s.requests.erase(r->id);
      return Status::Ok();
    }
    if (!seq->persisted.empty()) {
      if (Status restored = s.Restore(seq); !restored.ok()) {
        slot.failed = restored;
        s.Fail(seq, restored);
        return Status::Ok();  // the stream tells the turn's end, with why
      }
    }
    s.scheduler->Resume(seq);
    return Status::Ok();
  }));
  state_->cv.notify_all();
  return stream;
}

Status Engine::PauseSession(uint64_t session, PauseOptions options) {
  State& s = *state_;
  if (options.to_disk && s.options.persist_dir.empty()) {
    return Status::FailedPrecondition("pausing " + Named(session) +
                                      " to disk needs the engine's persist_dir, which is not set");
  }
  return RunOnLoop([&]() -> Status {
    auto it = s.sessions.find(session);
    if (it == s.sessions.end()) return Status::NotFound(Named(session) + " does not exist");
    State::Session& slot = it->second;
    if (slot.turn != 0) return Status::FailedPrecondition(Named(session) + " is generating; pause it after its turn");
    Sequence* seq = slot.seq.get();
    if (!options.to_disk || !seq->persisted.empty()) return Status::Ok();  // between turns it is paused already
    FR_RETURN_IF_ERROR(s.Persist(seq));
    s.scheduler->ReleaseBlocks(seq);
    std::vector<uint8_t>().swap(seq->routing);  // in the file until the next turn
    return Status::Ok();
  });
}

Status Engine::CloseSession(uint64_t session) {
  State& s = *state_;
  return RunOnLoop([&]() -> Status {
    auto it = s.sessions.find(session);
    if (it == s.sessions.end()) return Status::NotFound(Named(session) + " does not exist");
    if (it->second.turn != 0) s.AbortRequest(it->second.turn);  // parks the sequence
    s.Drop(it->second.seq.get());
    s.sessions.erase(it);
    return Status::Ok();
  });
}

Result<SequenceInfo> Engine::GetSession(uint64_t session) {
  State& s = *state_;
  SequenceInfo info;
  FR_RETURN_IF_ERROR(RunOnLoop([&]() -> Status {
    if (s.sessions.count(session) == 0) return Status::NotFound(Named(session) + " does not exist");
    const Sequence& seq = *s.live.at(session);
    info.id = seq.id;
    info.state = seq.paused ? "paused" : seq.running ? "running" : "waiting";
    info.prompt_tokens = seq.prompt_len;
    info.tokens = static_cast<int64_t>(seq.tokens.size());
    info.generated_tokens = info.tokens - seq.prompt_len;
    info.kv_blocks = static_cast<int64_t>(seq.blocks.size());
    info.on_disk = !seq.persisted.empty();
    info.prefill_tokens = seq.prefill_tokens;
    info.reprefill_tokens = seq.reprefill_tokens;
    return Status::Ok();
  }));
  return info;
}

}  // namespace flashroll::engine
