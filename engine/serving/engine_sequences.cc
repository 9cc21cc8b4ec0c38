#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "engine/serving/engine_state.h"

namespace flashroll::engine {

// ---- Sequences of a request: created, forked, appended to, ended --------

void RemoveSequenceFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    log::Warn("cannot remove a sequence file", {{"path", path}, {"error", std::strerror(errno)}});
  }
}

std::unique_ptr<Sequence> Engine::State::NewSequence(Request* req, int32_t choice) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_sequence_id++;
  seq->arrival = next_arrival++;
  seq->owner = req;
  seq->choice = choice;
  live[seq->id] = seq.get();
  return seq;
}

void Engine::State::Retire(Request* req, Sequence* seq) {
  if (seq->in_session) {
    Park(req, seq);
    return;
  }
  Drop(seq);
  req->done[seq->choice] = true;
  ++req->finished;
}

void Engine::State::Drop(Sequence* seq) {
  scheduler->Remove(seq);
  live.erase(seq->id);
  if (!seq->persisted.empty()) RemoveSequenceFile(std::exchange(seq->persisted, std::string()));
}

void Engine::State::Fail(Sequence* seq, const Status& why) {
  Request* req = static_cast<Request*>(seq->owner);
  StreamEvent e;
  e.choice = seq->choice;
  e.sequence_id = seq->id;
  e.finish = FinishReason::kAbort;
  e.error = why.message();
  Emit(req, std::move(e));
  Retire(req, seq);
  if (req->finished == req->params.n) requests.erase(req->id);
}

void Engine::State::Emit(Request* req, StreamEvent event) {
  if (std::shared_ptr<RequestStream> s = req->stream.lock()) s->Push(std::move(event));
}

void Engine::State::Admit(std::unique_ptr<Request> req) {
  Request* r = req.get();
  const int32_t n = r->params.n;
  r->text.resize(static_cast<size_t>(n));
  r->done.assign(static_cast<size_t>(n), false);
  for (const std::string& s : r->params.stop_strings) r->max_stop_bytes = std::max(r->max_stop_bytes, s.size());
  requests[r->id] = std::move(req);
  if (r->params.max_tokens == 0 && r->params.score_tokens.empty()) {
    for (int32_t c = 0; c < n; ++c) {
      StreamEvent e;
      e.choice = c;
      e.finish = FinishReason::kLength;
      Emit(r, e);
    }
    requests.erase(r->id);
    return;
  }
  std::unique_ptr<Sequence> seq = NewSequence(r, 0);
  seq->tokens = r->params.prompt;
  seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
  seq->computed_high = std::min(r->params.computed_before, seq->prompt_len);
  if (!r->params.score_tokens.empty()) {
    seq->scoring = true;
    seq->tokens.insert(seq->tokens.end(), r->params.score_tokens.begin(), r->params.score_tokens.end());
    const std::vector<int32_t>& given = r->params.score_routing;
    if (!given.empty()) {
      seq->cacheable = false;  // its KV follows the given experts, not the router
      seq->routing.reserve(given.size() * static_cast<size_t>(routing.IdBytes()));
      for (size_t at = 0; at < given.size(); at += static_cast<size_t>(routing.TokenIds())) {
        PackRouting(routing, &given[at], &seq->routing);
      }
    }
  }
  scheduler->AddWaiting(seq.get());
  r->seqs.push_back(std::move(seq));
}

void Engine::State::CancelRequest(uint64_t id) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  Request* req = it->second.get();
  for (auto& owned : req->seqs) {
    // A session keeps its sequence, with what the turn sampled.
    if (Sequence* seq = owned.get(); seq != nullptr && seq->in_session) {
      if (!req->done[seq->choice]) Park(req, seq);
    } else if (seq != nullptr) {
      Drop(seq);
    }
  }
  requests.erase(it);
}

void Engine::State::AbortRequest(uint64_t id) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  Request* req = it->second.get();
  for (int32_t c = 0; c < req->params.n; ++c) {
    if (req->done[c]) continue;
    StreamEvent e;
    e.choice = c;
    if (static_cast<size_t>(c) < req->seqs.size()) e.sequence_id = req->seqs[c]->id;
    e.finish = FinishReason::kAbort;
    Emit(req, e);
  }
  CancelRequest(id);
}

bool Engine::State::Append(Request* req, Sequence* seq, SampledToken token) {
  const GenerationRequest& p = req->params;
  const int32_t id = token.token;
  StreamEvent e;
  // The token was sampled from the logits of the sequence's last position.
  const int64_t from = static_cast<int64_t>(seq->tokens.size()) - 1;
  if (p.return_routing && from < RoutedTokens(*seq)) UnpackRouting(routing, seq->routing, from, &e.routing);
  if (p.return_prompt_routing && from == seq->prompt_len - 1) {
    for (int64_t t = 0; t < from && t < RoutedTokens(*seq); ++t) {
      e.prompt_routing.emplace_back();
      UnpackRouting(routing, seq->routing, t, &e.prompt_routing.back());
    }
  }
  seq->tokens.push_back(id);
  e.choice = seq->choice;
  e.sequence_id = seq->id;
  e.version = VersionOf(*seq);
  e.has_token = true;
  e.token = std::move(token);
  const int64_t generated = static_cast<int64_t>(seq->tokens.size()) - seq->prompt_len;
  FinishReason finish = FinishReason::kNone;
  std::string stop;
  const auto& eos = model->config().eos_token_ids;
  if (!p.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) finish = FinishReason::kStop;
  if (std::find(p.stop_tokens.begin(), p.stop_tokens.end(), id) != p.stop_tokens.end()) finish = FinishReason::kStop;
  if (finish == FinishReason::kNone && !p.stop_strings.empty()) {
    std::string& text = req->text[seq->choice];
    const size_t before = text.size();
    text += tokenizer->TokenBytes(id);
    // Only matches that end in the new bytes are new.
    const size_t from = before >= req->max_stop_bytes ? before - req->max_stop_bytes + 1 : 0;
    for (const std::string& s : p.stop_strings) {
      if (text.find(s, from) != std::string::npos) {
        finish = FinishReason::kStop;
        stop = s;
        break;
      }
    }
  }
  if (finish == FinishReason::kNone &&
      (generated >= p.max_tokens || static_cast<int64_t>(seq->tokens.size()) >= max_model_len)) {
    finish = FinishReason::kLength;
  }
  if (finish != FinishReason::kNone) {
    e.finish = finish;
    e.stop_string = stop;
    e.prefill_tokens = seq->prefill_tokens;
    e.reprefill_tokens = seq->reprefill_tokens;
    Emit(req, std::move(e));
    Retire(req, seq);
    return true;
  }
  Emit(req, std::move(e));
  return false;
}

void Engine::State::Fork(Request* req, Sequence* parent, const float* row) {
  // Every choice's first token comes from the prompt's last logits.
  const GenerationRequest& p = req->params;
  std::vector<Sequence*> children;
  for (int32_t c = 1; c < p.n; ++c) {
    std::unique_ptr<Sequence> child = NewSequence(req, c);
    child->tokens = parent->tokens;
    child->prompt_len = parent->prompt_len;
    child->computed = parent->computed;
    child->blocks = parent->blocks;
    child->hashes = parent->hashes;
    child->routing = parent->routing;
    child->cacheable = parent->cacheable;  // the prompt's KV is the parent's
    child->pinned_version = parent->pinned_version;
    child->computed_high = parent->computed_high;
    for (int32_t b : child->blocks) blocks->AddRef(b);
    scheduler->AddRunning(child.get());
    children.push_back(child.get());
    req->seqs.push_back(std::move(child));
  }
  // The prompt is the parent's tokens (a session's conversation so far).
  const std::vector<int32_t> prompt = parent->tokens;
  Append(req, parent, sampler->Sample(row, p.sampling, prompt, {}, 0, 0));
  for (Sequence* child : children) {
    Append(req, child, sampler->Sample(row, p.sampling, prompt, {}, static_cast<uint64_t>(child->choice), 0));
  }
}

}  // namespace flashroll::engine
