// Episode: one agent trajectory — the policy generates an assistant turn,
// the scaffold parses it, the tool runs in a workspace, its output is
// appended as token ids, and so on until an answer, a format error or a
// budget ends it; then the task's verifier scores it.
//
// Token-in/token-out: the conversation lives as one growing token sequence;
// the episode opens one PolicySession (policy.h) and asks each assistant
// turn with the whole conversation: the embedded engine keeps it as one
// session, paused with its KV while the tool runs, so only the new tokens
// are computed, across weight swaps too; a server gets each turn as a
// request of its own. Earlier turns are
// never re-tokenised, so the tokens a trainer sees are exactly the tokens the
// policy sampled, each with its raw logprob and weight version.
// The conversation is ChatML: <|im_start|>ROLE\nCONTENT<|im_end|>\n.
//
// Thread safety: RunEpisode is reentrant; many episodes share one Policy
// (an engine batches their turns together) and the Tokenizer is only read.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/failure_kind.h"
#include "rollout/policy.h"
#include "rollout/scaffold.h"
#include "tasks/task.h"
#include "tasks/workspace.h"

namespace flashroll {

struct EpisodeOptions {
  int effort = 100;
  int max_turns = 8;
  int64_t max_tokens = 3072;  // the whole conversation, prompt included
  double temperature = 0.7;
  uint64_t seed = 1;
  std::chrono::milliseconds tool_timeout{10000};
  // The episode stops at this time or when *cancel becomes true (checked
  // between tokens and between turns), with stop_reason "deadline" or
  // "cancelled"; its engine request is cancelled at once.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  const std::atomic<bool>* cancel = nullptr;
};

struct EpisodeTurn {
  std::string text;            // the assistant message as decoded
  bool format_valid = false;
  std::string format_error;    // the scaffold's message when not valid
  std::string command;
  ExecResult tool_result;
  // The l of the length reward (reasoning_length.h): the turn's sampled
  // tokens but its parsed action, counted on the tokens the engine sampled,
  // never re-tokenised; malformed and interrupted turns included.
  int64_t reasoning_tokens = 0;
  // The assistant message's tokens in Episode::tokens: [begin, end), its
  // closing <|im_end|> included.
  int64_t token_begin = 0, token_end = 0;
  int64_t generate_ms = 0, tool_ms = 0;
};

struct Episode {
  std::vector<int32_t> tokens;       // the whole conversation
  std::vector<uint8_t> sampled;      // 1 where the engine sampled the token
  std::vector<float> logprobs;       // the raw logprob of each sampled token, 0 elsewhere
  std::vector<int32_t> versions;     // the weight version that sampled each token, -1 elsewhere
  std::vector<EpisodeTurn> turns;
  std::string final_answer;
  bool answered = false;
  Verdict verdict;
  // "answer", "format_error", "max_turns", "max_tokens", "deadline",
  // "cancelled", "infrastructure"
  std::string stop_reason;
  // Set (with stop_reason "infrastructure") when the episode broke for a
  // reason no token the policy sampled could have caused (failure_kind.h):
  // it is no outcome of the agent's, and `failure` says what broke.
  std::optional<FailureKind> failure_kind;
  std::string failure;
  int64_t verify_ms = 0;
  // What the engine computed for the episode in prefill passes, and of
  // that recomputed (PrefillCounts; 0 from a server).
  int64_t prefill_tokens = 0, reprefill_tokens = 0;
  int64_t reasoning_tokens() const;  // over all turns
};

// Runs one episode of `task` in `workspace` (prepared here with the task's
// files) with turns from `policy`. A verdict that reads the workspace is
// taken in workspace.ForVerification() (tasks/workspace.h): after every
// process of the agent's is gone, over a copy of its working directory;
// `workspace` is not usable afterwards. A failure of the machinery (the
// task's files, the policy, a command that could not run, the check's
// set-up) ends the episode with its failure_kind set, naming the task and
// turn; a badly formatted turn ends it with verdict.success false. Errors
// only for a tokenizer that is not ChatML.
Result<Episode> RunEpisode(Policy& policy, const engine::Tokenizer& tokenizer,
                           const Scaffold& scaffold, const Task& task, Workspace& workspace,
                           const EpisodeOptions& options);

}  // namespace flashroll
