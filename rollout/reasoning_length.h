// The l of the length reward (rewards/length_reward.h): how many tokens a
// turn spent on anything but its action. One definition, used for the
// reward, the store's and export's `reasoning_tokens`, the run summary and
// evaluation (all read EpisodeTurn::reasoning_tokens, set from here).
//
//   l(turn) = the tokens the policy sampled in the turn (its closing
//             <|im_end|> included), minus the tokens wholly inside the
//             parsed action: the tool call or the <answer>...</answer>,
//             markup included, as Scaffold::Parse found it.
//
// So reasoning costs the same wherever it is written: inside the first
// <think>, in a second <think> block, between </think> and the call, after
// the answer, or in a message that never parses (nothing is an action then,
// so an unclosed <think> counts to the end). A token straddling the action's
// edge counts. What the action itself carries (a command, an answer) is
// free; text hidden in a command is outside what l can see.
//
// Thread safety: plain functions; the tokenizer is only read.
#pragma once

#include <cstdint>
#include <span>

#include "engine/tokenizer/tokenizer.h"
#include "rollout/scaffold.h"

namespace flashroll {

// l of one turn: `sampled` is every token the policy sampled in it, in order.
// The turn is parsed here from those tokens' bytes.
int64_t ReasoningTokens(const engine::Tokenizer& tokenizer, const Scaffold& scaffold,
                        std::span<const int32_t> sampled);

}  // namespace flashroll
