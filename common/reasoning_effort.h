// Reasoning effort b: how hard the policy is asked to think, 1 (least) to
// 100 (most), written into the system prompt as the line
// "Reasoning Effort: {b}". The length reward (rewards/length_reward.h)
// trains the policy to follow it; the scaffolds (rollout/scaffold.h) and
// the chat API (`reasoning_effort`, engine/server/) write the line with the
// same function, so served and trained behaviour match.
//
// Presets (the report's): "low" = 50, "high" = 75, "max" = 100.
//
// Thread safety: plain functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace flashroll {

constexpr int kMinReasoningEffort = 1;
constexpr int kMaxReasoningEffort = 100;

// What ParseReasoningEffort accepts, for error messages:
// "low" (50), "high" (75), "max" (100) or an integer 1-100.
std::string ReasoningEffortValues();

// A preset name or a decimal integer in [1, 100]; anything else is
// kInvalidArgument quoting `text` and listing the accepted values.
Result<int> ParseReasoningEffort(std::string_view text);

// "Reasoning Effort: {effort}".
std::string ReasoningEffortLine(int effort);

// `system` with ReasoningEffortLine(effort) as its last line: after a
// newline, or alone when `system` is empty.
std::string WithReasoningEffort(std::string_view system, int effort);

}  // namespace flashroll
