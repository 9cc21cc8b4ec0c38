// Pre-tokenizers: the regex splits that byte-level BPE vocabularies apply
// before merging (GPT-2, Llama 3, Qwen2, DeepSeek LLM, DeepSeek Coder).
//
// Each split is written by hand as a small matcher over code point classes
// (see unicode.h) that reproduces the leftmost-first semantics of the
// original pattern, including its backtracking corner cases such as
// `\s+(?!\S)`. Invalid UTF-8 bytes are kept, each as its own code point of
// class "other", so splitting never loses or alters bytes.
//
// Thread safety: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"

namespace flashroll::engine {

enum class PreTokenizerKind {
  kNone,           // the whole text is one piece (SentencePiece models)
  kGpt2,           // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,         // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,          // as kLlama3 but \p{N} one digit at a time
  kDeepseekLlm,    // a sequence of six isolating splits
  kDeepseekCoder,  // a sequence of five isolating splits
};

const char* PreTokenizerName(PreTokenizerKind kind);

// Maps a GGUF tokenizer.ggml.pre value ("gpt-2", "llama-bpe", "qwen2",
// "deepseek-llm", "deepseek-coder", ...) to a kind; kUnimplemented for others.
Result<PreTokenizerKind> PreTokenizerFromGgufName(std::string_view name);

// Maps a Hugging Face Split pattern (the "Regex" string of a tokenizer.json
// pre_tokenizer) to a kind: a single GPT-2/Llama 3/Qwen2 pattern, or the
// sequence of patterns of DeepSeek LLM/Coder. kUnimplemented otherwise.
Result<PreTokenizerKind> PreTokenizerFromPatterns(const std::vector<std::string>& patterns);

// Splits `text` into consecutive non-empty pieces that cover it exactly,
// appending views into `text` to *pieces.
void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>* pieces);

}  // namespace flashroll::engine
