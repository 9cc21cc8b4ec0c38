// StreamingDecoder: token-by-token text that never splits a UTF-8 character
// and adds up to exactly Tokenizer::Decode().
#include "engine/tokenizer/streaming_decoder.h"

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/format/gguf.h"
#include "engine/tokenizer/unicode.h"
#include "tests/engine/tokenizer_vectors.h"

namespace flashroll::engine {
namespace {

using testing::LoadVocab;

bool ValidUtf8(const std::string& s) { return SanitizeUtf8(s) == s; }

class TokenizerStreamingParityTest : public ::testing::TestWithParam<std::string> {};

// For every reference string: each step's output is valid UTF-8, and the
// concatenation equals Decode() of all ids.
TEST_P(TokenizerStreamingParityTest, AddsUpToDecode) {
  auto tok = LoadVocab(GetParam());
  std::ifstream in("tests/data/tokenizer-vectors/extra/" + GetParam() + ".jsonl");
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    std::string text = nlohmann::json::parse(line)["text"].get<std::string>();
    std::vector<int32_t> ids = tok->Encode(text, false);
    // DeepSeek's single-character added tokens (À, õ, ...) decode through
    // the byte alphabet to invalid bytes, as in Hugging Face: such texts do
    // not round-trip, everything else must.
    const bool round_trips = tok->Decode(ids) == text;
    StreamingDecoder dec(*tok, /*skip_special=*/false);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = dec.Push(id);
      EXPECT_TRUE(ValidUtf8(piece));
      // Valid input never needs a replacement character mid-stream.
      if (round_trips) {
        EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << text;
      }
      streamed += piece;
    }
    streamed += dec.Finish();
    EXPECT_EQ(streamed, tok->Decode(ids)) << text;
    cases += round_trips ? 1 : 0;
  }
  EXPECT_GT(cases, 300);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerStreamingParityTest,
                         ::testing::Values("gpt-2", "llama-spm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(TokenizerStreamingTest, HoldsBackSplitCharacters) {
  auto tok = LoadVocab("gpt-2");
  // GPT-2 has no token for this emoji: its 4 bytes come out in pieces.
  std::vector<int32_t> ids = tok->Encode("\xF0\x9F\xA6\x99", false);  // 🦙
  ASSERT_GT(ids.size(), 1u);
  StreamingDecoder dec(*tok, false);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(dec.Push(ids[i]), "") << i;
  EXPECT_EQ(dec.Push(ids.back()), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(dec.Finish(), "");
}

TEST(TokenizerStreamingTest, ByteFallbackAndLeadingSpace) {
  auto tok = LoadVocab("llama-spm");
  // SentencePiece: "▁Hello" streams as "Hello" (the prefix space is dropped
  // once), and a character outside the vocabulary arrives as <0xNN> bytes.
  std::vector<int32_t> ids = tok->Encode("Hello \xF0\x9F\xA6\x99!", false);
  StreamingDecoder dec(*tok, false);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(dec.Push(id));
  EXPECT_EQ(pieces.front(), "Hello");
  std::string all;
  for (const auto& p : pieces) all += p;
  EXPECT_EQ(all + dec.Finish(), "Hello \xF0\x9F\xA6\x99!");
  int empty = 0;
  for (const auto& p : pieces) empty += p.empty() ? 1 : 0;
  EXPECT_GE(empty, 3);  // the first three byte tokens of the emoji give nothing yet

  // Continuing text (not at the sequence start) keeps its leading space.
  StreamingDecoder cont(*tok, false, /*at_sequence_start=*/false);
  EXPECT_EQ(cont.Push(tok->Encode("Hi", false)[0]), " Hi");
}

TEST(TokenizerStreamingTest, InvalidBytesBecomeReplacementCharacters) {
  auto tok = LoadVocab("llama-spm");
  int32_t cont_byte = tok->TokenId("<0x80>");
  int32_t lead = tok->TokenId("<0xE2>");
  ASSERT_GE(cont_byte, 0);
  ASSERT_GE(lead, 0);
  StreamingDecoder dec(*tok, false);
  EXPECT_EQ(dec.Push(cont_byte), "\xEF\xBF\xBD");  // a stray continuation byte
  EXPECT_EQ(dec.Push(lead), "");                   // could still complete
  EXPECT_EQ(dec.Finish(), "\xEF\xBF\xBD");         // never did
}

TEST(TokenizerStreamingTest, SkipsControlTokensWhenAsked) {
  auto tok = LoadVocab("qwen2");
  int32_t im_end = tok->TokenId("<|im_end|>");
  StreamingDecoder keep(*tok, false);
  EXPECT_EQ(keep.Push(im_end), "<|im_end|>");
  StreamingDecoder skip(*tok, true);
  EXPECT_EQ(skip.Push(im_end), "");
}

TEST(TokenizerUtf8Test, IncompleteSuffix) {
  EXPECT_EQ(IncompleteUtf8Suffix("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xF0\x9F\xA6"), 3u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(IncompleteUtf8Suffix("\xC0"), 0u);      // overlong lead, never valid
  EXPECT_EQ(IncompleteUtf8Suffix("\x80"), 0u);
  EXPECT_EQ(SanitizeUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
}

}  // namespace
}  // namespace flashroll::engine
