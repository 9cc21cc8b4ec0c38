// The pieces of OpenAI response bodies that need the tokenizer: log
// probabilities in the legacy completions shape and in the chat shape.
//
//   completions: "logprobs": {"tokens": [...], "token_logprobs": [...],
//                "top_logprobs": [{token: logprob, ...}, ...] or null,
//                "text_offset": [...]}
//   chat:        "logprobs": {"content": [{"token", "logprob", "bytes",
//                "top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...]}
// The logprob is the raw one (log_softmax(logits / T), sampler.h): the
// distribution the model defines, before penalties and truncation. Every
// generated token is listed, the end-of-turn token included, so the entries
// line up with token_ids.
//
// Thread safety: free functions, reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/json.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

// A float32 as JSON: a number that reads back as the same float (a client
// parsing it as a double and rounding to float32 gets the exact bits). It is
// the double nearest the float's shortest decimal (at most 9 significant
// digits); nlohmann's writer (Grisu2) prints that decimal nearly always, and
// otherwise up to 17 digits of the same double. Not finite: null.
Json FloatJson(float value);

// Appends a float32 as JSON text: its shortest decimal (std::to_chars; at
// most 9 significant digits, in exponent form for large whole numbers),
// which reads back as the same float; "-0.0" for negative zero; null when
// not finite. For bodies written by hand where every digit counts.
void AppendFloatJson(float value, std::string* out);

// The token's text when its bytes are valid UTF-8 on their own; otherwise
// "bytes:\xe2\x80" with each byte as \xNN (OpenAI's form for a piece of a
// character).
std::string LogprobTokenString(const Tokenizer& tokenizer, int32_t id);

// An empty legacy completions logprobs object.
Json EmptyCompletionLogprobs(bool with_top);
// Appends `samples` to a legacy logprobs object. *text_offset is the byte
// offset in the choice's text where the first sample's token starts; it is
// advanced past each token.
void AppendCompletionLogprobs(const Tokenizer& tokenizer, std::span<const SampledToken> samples, bool with_top,
                              size_t* text_offset, Json* logprobs);

// The chat "content" entries of `samples`.
Json ChatLogprobContent(const Tokenizer& tokenizer, std::span<const SampledToken> samples, bool with_top);

// `prefix` and 24 random hex digits, e.g. "chatcmpl-3f9c..." or "call_08ab...".
std::string NewResponseId(const char* prefix);

}  // namespace flashroll::engine
