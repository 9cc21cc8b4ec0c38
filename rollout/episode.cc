#include "rollout/episode.h"

#include <random>

#include "engine/models/generate.h"

namespace flashroll {
namespace {

// Appends a ChatML message header and content as tokens: everything the
// engine did not sample. Segments start right after <|im_end|> or at the
// beginning, where BPE cannot merge across, so encoding them separately gives
// the same ids as encoding the whole conversation at once.
void AppendText(const engine::Tokenizer& tokenizer, const std::string& text, Episode* episode) {
  tokenizer.EncodeAppend(text, /*parse_special=*/true, &episode->tokens);
  episode->sampled.resize(episode->tokens.size(), 0);
}

int64_t CountTokens(const engine::Tokenizer& tokenizer, const std::string& text) {
  return static_cast<int64_t>(tokenizer.Encode(text, false).size());
}

}  // namespace

Result<Episode> RunEpisode(const engine::Model& model, const engine::Tokenizer& tokenizer,
                           const Scaffold& scaffold, const Task& task, Workspace& workspace,
                           const EpisodeOptions& options) {
  const int32_t im_end = tokenizer.TokenId("<|im_end|>");
  if (im_end < 0) return Status::InvalidArgument("tokenizer has no <|im_end|> token: not a ChatML model");
  FR_RETURN_IF_ERROR(PrepareWorkspace(task, workspace));

  Episode episode;
  AppendText(tokenizer,
             "<|im_start|>system\n" + scaffold.SystemPrompt(options.effort) + "<|im_end|>\n<|im_start|>user\n" +
                 task.prompt + "<|im_end|>\n<|im_start|>assistant\n",
             &episode);

  engine::KvCache cache = model.NewCache();
  std::mt19937_64 rng(options.seed);
  std::vector<float> logits;
  size_t fed = 0;  // tokens already in the KV cache
  const int64_t vocab = model.config().vocab_size;
  episode.stop_reason = "max_turns";

  for (int turn_index = 0; turn_index < options.max_turns; ++turn_index) {
    // Generate one assistant message, up to and including <|im_end|>.
    std::vector<int32_t> message;
    bool closed = false;
    while (static_cast<int64_t>(episode.tokens.size()) < options.max_tokens) {
      std::vector<int32_t> pending(episode.tokens.begin() + static_cast<long>(fed), episode.tokens.end());
      FR_RETURN_IF_ERROR(model.Forward(pending, &cache, /*all_logits=*/false, &logits).Wrap("episode " + task.id));
      fed = episode.tokens.size();
      const int32_t next = options.temperature == 0
                               ? engine::ArgMax(logits.data(), vocab)
                               : engine::SampleToken(logits.data(), vocab, options.temperature, &rng);
      episode.tokens.push_back(next);
      episode.sampled.push_back(1);
      if (next == im_end || tokenizer.IsEndOfGeneration(next)) {
        closed = true;
        break;
      }
      message.push_back(next);
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
    AppendText(tokenizer,
               "\n<|im_start|>tool\n" + Scaffold::RenderToolResult(turn.tool_result) +
                   "<|im_end|>\n<|im_start|>assistant\n",
               &episode);
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
