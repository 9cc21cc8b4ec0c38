// Special and added tokens, BOS/EOS metadata, lossless handling of invalid
// UTF-8, and pre-tokenizer splits.
#include <gtest/gtest.h>

#include "engine/format/gguf.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer_vectors.h"

namespace flashroll::engine {
namespace {

using testing::LoadVocab;

TEST(TokenizerSpecialTest, ControlTokensOnlyWithParseSpecial) {
  auto tok = LoadVocab("qwen2");
  const int32_t im_start = 151644;
  const int32_t im_end = 151645;
  std::vector<int32_t> parsed = tok->Encode("<|im_start|>user\nhi<|im_end|>", true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), im_start);
  EXPECT_EQ(parsed.back(), im_end);
  std::vector<int32_t> literal = tok->Encode("<|im_start|>user\nhi<|im_end|>", false);
  for (int32_t id : literal) {
    EXPECT_NE(id, im_start);
    EXPECT_NE(id, im_end);
  }
  EXPECT_EQ(tok->Decode(literal), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(tok->Decode(parsed, /*skip_special=*/true), "user\nhi");
  EXPECT_EQ(tok->TokenId("<|im_end|>"), im_end);
  EXPECT_EQ(tok->TokenText(im_end), "<|im_end|>");
  EXPECT_TRUE(tok->IsControl(im_end));
  EXPECT_TRUE(tok->IsEndOfGeneration(im_end));      // detected turn end
  EXPECT_TRUE(tok->IsEndOfGeneration(tok->eos_id()));  // <|endoftext|>
  EXPECT_FALSE(tok->IsEndOfGeneration(im_start));
  EXPECT_EQ(tok->chat_template().find("<|im_start|>") != std::string::npos, true);
}

TEST(TokenizerSpecialTest, UserDefinedTokensAlwaysMatch) {
  auto tok = LoadVocab("deepseek-coder");
  int32_t hole = tok->TokenId("<｜fim▁hole｜>");
  ASSERT_GE(hole, 0);
  EXPECT_EQ(tok->TokenTypeOf(hole), TokenType::kUserDefined);
  std::vector<int32_t> ids = tok->Encode("a<｜fim▁hole｜>b", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], hole);
  EXPECT_EQ(tok->bos_id(), 32013);
  EXPECT_TRUE(tok->add_bos());
}

TEST(TokenizerSpecialTest, SentencePieceSpacesAroundSpecialTokens) {
  auto tok = LoadVocab("llama-spm");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_TRUE(tok->add_space_prefix());
  // Each text fragment after a special token gets the ▁ prefix again.
  std::vector<int32_t> ids = tok->Encode("<s>Hello</s>Hello", true);
  std::vector<int32_t> hello = tok->Encode("Hello", false);
  std::vector<int32_t> expected = {1};
  expected.insert(expected.end(), hello.begin(), hello.end());
  expected.push_back(2);
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok->TokenText(hello[0]), "▁Hello");
  EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true), "Hello Hello");
  EXPECT_EQ(tok->Decode(ids), "<s> Hello</s> Hello");
}

TEST(TokenizerSpecialTest, InvalidUtf8IsKeptByteForByte) {
  const std::string raw = "ok \xFF\xFE bad \xE2\x82 cut \xC0\xAF";
  for (const char* vocab : {"gpt-2", "llama-bpe", "llama-spm", "deepseek-llm"}) {
    auto tok = LoadVocab(vocab);
    std::vector<int32_t> ids = tok->Encode(raw, false);
    std::string bytes;
    for (int32_t id : ids) bytes += tok->TokenBytes(id);
    if (tok->add_space_prefix()) bytes.erase(0, 1);
    EXPECT_EQ(bytes, raw) << vocab;
    EXPECT_EQ(tok->Decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD bad \xEF\xBF\xBD\xEF\xBF\xBD cut \xEF\xBF\xBD\xEF\xBF\xBD")
        << vocab;
  }
}

TEST(TokenizerSpecialTest, LongInputs) {
  auto tok = LoadVocab("llama-bpe");
  for (const std::string& text : {std::string(200000, ' '), std::string(200000, 'a'),
                                  std::string(100000, '7'), std::string(50000, '\n')}) {
    std::vector<int32_t> ids = tok->Encode(text, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok->Decode(ids), text);
  }
  EXPECT_TRUE(tok->Encode("", true).empty());
}

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  PreTokenize(kind, text, &pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizerTest, HandCheckedSplits) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, "Hello world's  end\n"),
            (V{"Hello", " world", "'s", " ", " end", "\n"}));
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "I'LL pay 12345!!\n\n  x"),
            (V{"I", "'LL", " pay", " ", "123", "45", "!!\n\n", " ", " x"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "x 123"), (V{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(Split(PreTokenizerKind::kDeepseekCoder, "ab12\ncd"), (V{"ab", "1", "2", "\n", "cd"}));
  EXPECT_EQ(Split(PreTokenizerKind::kDeepseekLlm, "Hi 中文 42"), (V{"Hi", " ", "中文", " ", "42"}));
  EXPECT_EQ(Split(PreTokenizerKind::kNone, "a b"), (V{"a b"}));
  EXPECT_TRUE(Split(PreTokenizerKind::kGpt2, "").empty());
}

TEST(PreTokenizerTest, Names) {
  EXPECT_EQ(*PreTokenizerFromGgufName("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*PreTokenizerFromGgufName("deepseek-coder"), PreTokenizerKind::kDeepseekCoder);
  EXPECT_EQ(PreTokenizerFromGgufName("falcon").status().code(), Code::kUnimplemented);
  EXPECT_EQ(PreTokenizerFromPatterns({"\\d+"}).status().code(), Code::kUnimplemented);
}

}  // namespace
}  // namespace flashroll::engine
