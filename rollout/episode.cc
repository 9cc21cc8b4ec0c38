#include "rollout/episode.h"

#include <algorithm>

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
}

int64_t CountTokens(const engine::Tokenizer& tokenizer, const std::string& text) {
  return static_cast<int64_t>(tokenizer.Encode(text, false).size());
}

}  // namespace

Result<Episode> RunEpisode(engine::Engine& engine, const engine::Tokenizer& tokenizer,
                           const Scaffold& scaffold, const Task& task, Workspace& workspace,
                           const EpisodeOptions& options) {
  const int32_t im_end = tokenizer.TokenId("<|im_end|>");
  if (im_end < 0) return Status::InvalidArgument("tokenizer has no <|im_end|> token: not a ChatML model");
  FR_RETURN_IF_ERROR(PrepareWorkspace(task, workspace));

  Episode episode;
  AppendText(tokenizer,
             "<|im_start|>system\n" + scaffold.SystemPrompt(options.effort) + "<|im_end|>\n<|im_start|>user\n",
             &episode);
  AppendText(tokenizer, task.prompt, &episode, /*content=*/true);
  AppendText(tokenizer, "<|im_end|>\n<|im_start|>assistant\n", &episode);

  episode.stop_reason = "max_turns";
  std::vector<int32_t> stops = {im_end};
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (id != im_end && tokenizer.IsEndOfGeneration(id)) stops.push_back(id);
  }

  for (int turn_index = 0; turn_index < options.max_turns; ++turn_index) {
    // Generate one assistant message, up to and including <|im_end|>.
    std::vector<int32_t> message;
    bool closed = false;
    const int64_t budget = std::min(options.max_tokens, engine.max_model_len()) -
                           static_cast<int64_t>(episode.tokens.size());
    if (budget > 0) {
      engine::GenerationRequest request;
      request.prompt = episode.tokens;
      request.max_tokens = budget;
      request.stop_tokens = stops;
      request.ignore_eos = true;  // the stop tokens above decide
      request.sampling.temperature = options.temperature;
      // Each turn draws from its own stream of the episode's seed.
      request.sampling.seed = options.seed * 1'000'003ull + static_cast<uint64_t>(turn_index);
      auto choices = engine.Generate(std::move(request));
      if (!choices.ok()) return choices.status().Wrap("episode " + task.id);
      const engine::Choice& choice = (*choices)[0];
      if (choice.finish == engine::FinishReason::kAbort) return Status::Unavailable("episode " + task.id + ": the engine stopped");
      for (const engine::SampledToken& t : choice.samples) {
        episode.tokens.push_back(t.token);
        episode.sampled.push_back(1);
        episode.logprobs.push_back(t.logprob);
        if (std::find(stops.begin(), stops.end(), t.token) != stops.end()) {
          closed = true;
          break;
        }
        message.push_back(t.token);
      }
    }

    EpisodeTurn turn;
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
    turn.reasoning_tokens = CountTokens(tokenizer, parsed->reasoning);
    if (parsed->has_answer) {
      episode.final_answer = parsed->final_answer;
      episode.answered = true;
      episode.turns.push_back(std::move(turn));
      episode.stop_reason = "answer";
      break;
    }
    turn.command = parsed->command;
    FR_ASSIGN_OR_RETURN(turn.tool_result, workspace.Exec(turn.command, options.tool_timeout));
    AppendText(tokenizer, "\n<|im_start|>tool\n", &episode);
    AppendText(tokenizer, Scaffold::RenderToolResult(turn.tool_result), &episode, /*content=*/true);
    AppendText(tokenizer, "<|im_end|>\n<|im_start|>assistant\n", &episode);
    episode.turns.push_back(std::move(turn));
  }
  episode.verdict = episode.answered || !task.answer_file.empty()
                        ? VerifyTask(task, episode.final_answer, workspace)
                        : Verdict{false, "no answer (" + episode.stop_reason + ")" +
                                             (episode.verdict.reason.empty() ? "" : ": " + episode.verdict.reason)};
  if (!episode.answered && episode.verdict.success) {
    // A file task whose file is right still needs the agent to finish.
    episode.verdict = {false, "the file is right but the agent did not answer (" + episode.stop_reason + ")"};
  }
  return episode;
}

}  // namespace flashroll
