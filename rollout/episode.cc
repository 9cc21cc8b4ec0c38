#include "rollout/episode.h"

#include <algorithm>
#include <optional>
#include <span>

#include "rollout/reasoning_length.h"

namespace flashroll {
namespace {

// Appends tokens the engine did not sample. `markup` is our own ChatML
// framing, where special tokens are meant; `content` comes from outside (a
// task's prompt, a tool's output) and is always plain text, so a file that
// contains "<|im_end|><|im_start|>assistant" cannot forge a turn.
void AppendText(const engine::Tokenizer& tokenizer, const std::string& markup, Episode* episode,
                bool content = false) {
  tokenizer.EncodeAppend(markup, /*parse_special=*/!content, &episode->tokens);
  episode->sampled.resize(episode->tokens.size(), 0);
  episode->logprobs.resize(episode->tokens.size(), 0.0f);
  episode->versions.resize(episode->tokens.size(), -1);
}

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int64_t Episode::reasoning_tokens() const {
  int64_t total = 0;
  for (const EpisodeTurn& t : turns) total += t.reasoning_tokens;
  return total;
}

namespace {

// Why the episode must stop now, if it must.
std::optional<std::string> Interrupted(const EpisodeOptions& options) {
  if (options.cancel && options.cancel->load()) return "cancelled";
  if (std::chrono::steady_clock::now() >= options.deadline) return "deadline";
  return std::nullopt;
}

// The verdict on `task`'s outcome. A check that reads the workspace runs in
// the one ForVerification returns, after every process of the agent's is
// gone; a working directory too large to copy fails the task (the agent
// filled it), any other failure there is the machinery's (an error), as is
// a check that could not be set up (Verdict::machinery_failed).
Result<Verdict> Judge(const Task& task, const std::string& final_answer, Workspace& workspace) {
  if (!VerdictReadsWorkspace(task)) return VerifyTask(task, final_answer, workspace);
  auto checked = workspace.ForVerification();
  if (!checked.ok() && checked.status().code() == Code::kResourceExhausted) {
    return Verdict{false, "the working directory could not be copied for the check: " + checked.status().message()};
  }
  if (!checked.ok()) return checked.status().Wrap("episode " + task.id + ": verification");
  return VerifyTask(task, final_answer, **checked);
}

// Ends `episode` as an infrastructure failure.
void Broke(Episode& episode, FailureKind kind, const Status& why) {
  episode.stop_reason = "infrastructure";
  episode.failure_kind = kind;
  episode.failure = why.ToString();
  episode.verdict = {false, std::string(FailureKindName(kind)) + ": " + episode.failure};
}

}  // namespace

Result<Episode> RunEpisode(Policy& policy, const engine::Tokenizer& tokenizer,
                           const Scaffold& scaffold, const Task& task, Workspace& workspace,
                           const EpisodeOptions& options) {
  const int32_t im_end = tokenizer.TokenId("<|im_end|>");
  if (im_end < 0) return Status::InvalidArgument("tokenizer has no <|im_end|> token: not a ChatML model");
  Episode episode;
  if (Status prepared = PrepareWorkspace(task, workspace); !prepared.ok()) {
    Broke(episode, FailureKind::kHarnessCrash, prepared);
    return episode;
  }
  AppendText(tokenizer,
             "<|im_start|>system\n" + scaffold.SystemPrompt(options.effort) + "<|im_end|>\n<|im_start|>user\n",
             &episode);
  AppendText(tokenizer, task.prompt, &episode, /*content=*/true);
  AppendText(tokenizer, "<|im_end|>\n<|im_start|>assistant\n", &episode);

  auto session = policy.OpenSession();
  if (!session.ok()) {
    Broke(episode, FailureKind::kPolicyUnreachable, session.status().Wrap("episode " + task.id));
    return episode;
  }
  episode.stop_reason = "max_turns";
  std::vector<int32_t> stops = {im_end};
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (id != im_end && tokenizer.IsEndOfGeneration(id)) stops.push_back(id);
  }

  for (int turn_index = 0; turn_index < options.max_turns; ++turn_index) {
    if (auto why = Interrupted(options)) {
      episode.stop_reason = *why;
      break;
    }
    // Generate one assistant message, up to and including <|im_end|>.
    std::vector<int32_t> message;
    bool closed = false;
    EpisodeTurn turn;
    turn.token_begin = static_cast<int64_t>(episode.tokens.size());
    const auto generate_start = std::chrono::steady_clock::now();
    const int64_t budget = std::min(options.max_tokens, policy.max_model_len()) -
                           static_cast<int64_t>(episode.tokens.size());
    if (budget > 0) {
      PolicyRequest request;
      request.prompt = episode.tokens;
      request.max_tokens = budget;
      request.stop_tokens = stops;
      request.temperature = options.temperature;
      // Each turn draws from its own stream of the episode's seed.
      request.seed = options.seed * 1'000'003ull + static_cast<uint64_t>(turn_index);
      std::optional<std::string> interrupted;
      auto stopped = (*session)->Generate(
          request,
          [&](const PolicyToken& t) {
            if (closed) return;
            episode.tokens.push_back(t.token);
            episode.sampled.push_back(1);
            episode.logprobs.push_back(t.logprob);
            episode.versions.push_back(static_cast<int32_t>(t.version));
            if (std::find(stops.begin(), stops.end(), t.token) != stops.end()) {
              closed = true;
            } else {
              message.push_back(t.token);
            }
          },
          [&] { return (interrupted = Interrupted(options)).has_value(); });
      if (!stopped.ok()) {
        turn.token_end = static_cast<int64_t>(episode.tokens.size());
        episode.turns.push_back(std::move(turn));
        Broke(episode, FailureKind::kPolicyUnreachable,
              stopped.status().Wrap("episode " + task.id + ", turn " + std::to_string(turn_index)));
        break;
      }
      if (*stopped && interrupted) {
        turn.token_end = static_cast<int64_t>(episode.tokens.size());
        turn.generate_ms = MsSince(generate_start);
        episode.turns.push_back(std::move(turn));
        episode.stop_reason = *interrupted;
        break;
      }
    }
    turn.token_end = static_cast<int64_t>(episode.tokens.size());
    turn.generate_ms = MsSince(generate_start);

    turn.text = tokenizer.Decode(message, /*skip_special=*/false);
    if (!closed) {
      turn.format_error = "the message did not end within the token budget";
      episode.turns.push_back(std::move(turn));
      episode.stop_reason = "max_tokens";
      break;
    }
    auto parsed = scaffold.Parse(turn.text);
    if (!parsed.ok()) {
      turn.format_error = parsed.status().message();
      episode.verdict.reason = turn.format_error;
      episode.turns.push_back(std::move(turn));
      episode.stop_reason = "format_error";
      break;
    }
    turn.format_valid = true;
    if (parsed->has_answer) {
      episode.final_answer = parsed->final_answer;
      episode.answered = true;
      episode.turns.push_back(std::move(turn));
      episode.stop_reason = "answer";
      break;
    }
    turn.command = parsed->command;
    const auto tool_start = std::chrono::steady_clock::now();
    // A command that could not run at all found the sandbox gone before it
    // started (SandboxWorkspace::Exec); one that died while it ran is a
    // result, the agent's outcome.
    Result<ExecResult> ran = workspace.Exec(turn.command, options.tool_timeout);
    if (!ran.ok()) {
      episode.turns.push_back(std::move(turn));
      Broke(episode, FailureKind::kSandboxLost,
            ran.status().Wrap("episode " + task.id + ", turn " + std::to_string(turn_index) + ": the command"));
      break;
    }
    turn.tool_result = std::move(ran).value();
    turn.tool_ms = MsSince(tool_start);
    AppendText(tokenizer, "\n<|im_start|>tool\n", &episode);
    AppendText(tokenizer, Scaffold::RenderToolResult(turn.tool_result), &episode, /*content=*/true);
    AppendText(tokenizer, "<|im_end|>\n<|im_start|>assistant\n", &episode);
    episode.turns.push_back(std::move(turn));
  }
  const PrefillCounts counts = (*session)->counts();
  episode.prefill_tokens = counts.prefill_tokens;
  episode.reprefill_tokens = counts.reprefill_tokens;
  (*session).reset();  // the engine's KV goes back before the verifier runs
  // Every turn pays for its tokens, malformed and interrupted ones too, so
  // neither a broken format nor a deadline escapes the length penalty.
  for (EpisodeTurn& turn : episode.turns) {
    turn.reasoning_tokens = ReasoningTokens(
        tokenizer, scaffold,
        std::span<const int32_t>(episode.tokens).subspan(static_cast<size_t>(turn.token_begin),
                                                         static_cast<size_t>(turn.token_end - turn.token_begin)));
  }
  if (episode.failure_kind) return episode;
  const auto verify_start = std::chrono::steady_clock::now();
  if (episode.answered || !task.answer_file.empty()) {
    Result<Verdict> verdict = Judge(task, episode.final_answer, workspace);
    if (!verdict.ok() || verdict->machinery_failed) {
      Broke(episode, FailureKind::kVerifierCrash,
            verdict.ok() ? Status::Internal("episode " + task.id + ": the check could not be set up: " + verdict->reason)
                         : verdict.status());
      episode.verify_ms = MsSince(verify_start);
      return episode;
    }
    episode.verdict = *verdict;
  } else {
    episode.verdict = {false, "no answer (" + episode.stop_reason + ")" +
                                  (episode.verdict.reason.empty() ? "" : ": " + episode.verdict.reason)};
  }
  if (!episode.answered && episode.verdict.success) {
    // A file task whose file is right still needs the agent to finish.
    episode.verdict = {false, "the file is right but the agent did not answer (" + episode.stop_reason + ")"};
  }
  episode.verify_ms = MsSince(verify_start);
  return episode;
}

}  // namespace flashroll
