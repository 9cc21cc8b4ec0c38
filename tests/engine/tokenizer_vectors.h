// The llama.cpp tokenizer test vocabularies (tests/data/tokenizer-vectors),
// loaded as the engine loads a GGUF model's tokenizer.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "engine/format/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine::testing {

// ggml-vocab-VOCAB.gguf's tokenizer (a test failure, and a crash, when it
// cannot be loaded).
inline std::unique_ptr<Tokenizer> LoadVocab(const std::string& vocab) {
  auto gguf = GgufFile::Open("tests/data/tokenizer-vectors/ggml-vocab-" + vocab + ".gguf");
  EXPECT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = Tokenizer::FromGguf(**gguf);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(*tok);
}

}  // namespace flashroll::engine::testing
