// Edges of Tokenizer::Create's checks on a hand-written vocabulary: special
// token ids must lie inside the vocabulary (an id equal to its size reads past
// the token table later), sizes must match, merges must name known tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <fstream>

#include "engine/format/gguf.h"
#include "engine/tokenizer/byte_alphabet.h"
#include "engine/tokenizer/unicode.h"

#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {
namespace {

// A SentencePiece vocabulary of five tokens: <unk> <s> </s> ▁a b.
TokenizerSpec FiveTokens() {
  TokenizerSpec spec;
  spec.source = "five.vocab";
  spec.model = TokenizerModel::kSentencePieceBpe;
  spec.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "b"};
  spec.scores = {0, 0, 0, -1, -2};
  return spec;
}

Status CreateWith(void (*edit)(TokenizerSpec&)) {
  TokenizerSpec spec = FiveTokens();
  edit(spec);
  auto tok = Tokenizer::Create(std::move(spec));
  return tok.ok() ? Status::Ok() : tok.status();
}

TEST(TokenizerMutantsTest, SpecialIdsMustLieInsideTheVocabulary) {
  // The last id is fine; the vocabulary size itself is one past the table.
  EXPECT_TRUE(CreateWith([](TokenizerSpec& s) { s.eos_id = 4; }).ok());
  Status eos = CreateWith([](TokenizerSpec& s) { s.eos_id = 5; });
  EXPECT_EQ(eos.code(), Code::kInvalidArgument);
  EXPECT_EQ(eos.message(), "five.vocab: eos id 5 is outside the vocabulary of 5");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.bos_id = 5; }).message(),
            "five.vocab: bos id 5 is outside the vocabulary of 5");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.unk_id = 5; }).message(),
            "five.vocab: unk id 5 is outside the vocabulary of 5");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.pad_id = 5; }).message(),
            "five.vocab: pad id 5 is outside the vocabulary of 5");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.extra_eos_ids = {2, 5}; }).message(),
            "five.vocab: end-of-generation id 5 is outside the vocabulary of 5");
  // -1 means "none"; anything below is refused.
  EXPECT_TRUE(CreateWith([](TokenizerSpec& s) { s.bos_id = -1; s.eos_id = -1; s.unk_id = -1; s.pad_id = -1; }).ok());
  EXPECT_FALSE(CreateWith([](TokenizerSpec& s) { s.bos_id = -2; }).ok());
  EXPECT_FALSE(CreateWith([](TokenizerSpec& s) { s.pad_id = -2; }).ok());
  EXPECT_TRUE(CreateWith([](TokenizerSpec& s) { s.bos_id = 0; s.eos_id = 0; s.unk_id = 0; s.pad_id = 0; }).ok());
  // With no end-of-sequence token, -1 ("none") is not one.
  auto none = Tokenizer::Create(FiveTokens());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->eos_id(), -1);
  EXPECT_FALSE((*none)->IsEndOfGeneration(-1));
}

TEST(TokenizerMutantsTest, IdsAreKept) {
  TokenizerSpec spec = FiveTokens();
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  spec.pad_id = 4;
  spec.add_bos = true;
  spec.extra_eos_ids = {3};
  auto tok = Tokenizer::Create(std::move(spec));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->vocab_size(), 5);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_EQ((*tok)->unk_id(), 0);
  EXPECT_EQ((*tok)->pad_id(), 4);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_FALSE((*tok)->add_eos());
  EXPECT_TRUE((*tok)->IsEndOfGeneration(2));
  EXPECT_TRUE((*tok)->IsEndOfGeneration(3));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(4));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(-1));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(5));
  EXPECT_EQ((*tok)->TokenText(4), "b");
  EXPECT_EQ((*tok)->TokenText(5), "");
  EXPECT_EQ((*tok)->TokenText(-1), "");
  EXPECT_EQ((*tok)->TokenTypeOf(5), TokenType::kUndefined);
  EXPECT_EQ((*tok)->TokenTypeOf(-1), TokenType::kUndefined);
  EXPECT_EQ((*tok)->TokenTypeOf(4), TokenType::kNormal);
  EXPECT_EQ((*tok)->TokenBytes(5), "");
  EXPECT_EQ((*tok)->TokenId("b"), 4);
  EXPECT_EQ((*tok)->TokenId("c"), -1);
}

TEST(TokenizerMutantsTest, SizesMustMatch) {
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.tokens.clear(); s.scores.clear(); }).message(),
            "five.vocab: empty vocabulary");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.scores.pop_back(); }).message(),
            "five.vocab: 4 token scores for 5 tokens");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.types.assign(6, TokenType::kNormal); }).message(),
            "five.vocab: 6 token types for 5 tokens");
  EXPECT_TRUE(CreateWith([](TokenizerSpec& s) { s.types.assign(5, TokenType::kNormal); }).ok());
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.scores.clear(); }).message(),
            "five.vocab: SentencePiece vocabulary has neither scores nor merges");
  // Rank-ordered merges instead of scores.
  EXPECT_TRUE(CreateWith([](TokenizerSpec& s) {
                s.scores.clear();
                s.tokens.push_back("bb");
                s.merges = {{"b", "b"}};
              }).ok());
}

TEST(TokenizerMutantsTest, MergesMustNameKnownTokens) {
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.merges = {{"x", "b"}}; }).message(),
            "five.vocab: merge 0 ('x' 'b'): left part is not in the vocabulary");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.merges = {{"b", "x"}}; }).message(),
            "five.vocab: merge 0 ('b' 'x'): right part is not in the vocabulary");
  EXPECT_EQ(CreateWith([](TokenizerSpec& s) { s.merges = {{"b", "b"}}; }).message(),
            "five.vocab: merge 0 ('b' 'b'): merged token is not in the vocabulary");
  EXPECT_TRUE(CreateWith([](TokenizerSpec& s) {
                s.tokens.push_back("bb");
                s.scores.push_back(-3);
                s.merges = {{"b", "b"}};
              }).ok());
}

TEST(TokenizerMutantsTest, ByteLevelVocabularyNeedsEveryByte) {
  TokenizerSpec spec;
  spec.source = "bytes.json";
  spec.model = TokenizerModel::kByteLevelBpe;
  spec.tokens = {"a", "b"};
  auto tok = Tokenizer::Create(std::move(spec));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("byte-level vocabulary has no token for byte"), std::string::npos)
      << tok.status().ToString();
}

// A merged-away symbol must never merge again: with "b a c", (b, a) merges
// first and the queued pair (a, c) is stale, even when "a" is token 0.
TEST(TokenizerMutantsTest, StalePairsAfterAMergeAreSkipped) {
  TokenizerSpec spec;
  spec.source = "stale.vocab";
  spec.model = TokenizerModel::kSentencePieceBpe;
  spec.add_space_prefix = false;
  spec.tokens = {"a", "b", "c", "ba", "ac"};
  spec.merges = {{"b", "a"}, {"a", "c"}};
  auto tok = Tokenizer::Create(std::move(spec));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Encode("bac", false), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ((*tok)->Encode("ac", false), (std::vector<int32_t>{4}));
  EXPECT_EQ((*tok)->Encode("bacac", false), (std::vector<int32_t>{3, 2, 4}));
}

// tokenizer.json: model.unk_token names the unknown token, null means none.
TEST(TokenizerMutantsTest, JsonUnknownToken) {
  using Json = nlohmann::ordered_json;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    AppendUtf8(ByteToAlphabet(static_cast<uint8_t>(b)), &s);
    vocab[s] = b;
  }
  vocab["<unk>"] = 256;
  Json j;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}, {"unk_token", "<unk>"}};
  auto with = Tokenizer::FromHuggingFaceText(j.dump(), "", "unk/tokenizer.json");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ((*with)->unk_id(), 256);
  j["model"]["unk_token"] = nullptr;
  auto none = Tokenizer::FromHuggingFaceText(j.dump(), "", "unk/tokenizer.json");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ((*none)->unk_id(), -1);
  j["model"]["unk_token"] = 7;
  EXPECT_FALSE(Tokenizer::FromHuggingFaceText(j.dump(), "", "unk/tokenizer.json").ok());
}

// tokenizer.json in the SentencePiece style: a Prepend("▁") normalizer adds
// the space prefix, Replace(" ", "▁") alone does not.
TEST(TokenizerMutantsTest, JsonSentencePieceNormalizers) {
  using Json = nlohmann::ordered_json;
  const std::string space = "\xe2\x96\x81";
  Json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", {{"<unk>", 0}, {space, 1}, {"a", 2}, {space + "a", 3}}},
                {"merges", Json::array({space + " a"})},
                {"unk_token", "<unk>"}};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", Json::array({Json{{"type", "Prepend"}, {"prepend", space}},
                                                  Json{{"type", "Replace"},
                                                       {"pattern", {{"String", " "}}},
                                                       {"content", space}}})}};
  auto prepended = Tokenizer::FromHuggingFaceText(j.dump(), "", "spm/tokenizer.json");
  ASSERT_TRUE(prepended.ok()) << prepended.status().ToString();
  EXPECT_EQ((*prepended)->model(), TokenizerModel::kSentencePieceBpe);
  EXPECT_TRUE((*prepended)->add_space_prefix());
  EXPECT_EQ((*prepended)->Encode("a", false), std::vector<int32_t>{3});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  auto replaced = Tokenizer::FromHuggingFaceText(j.dump(), "", "spm/tokenizer.json");
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_FALSE((*replaced)->add_space_prefix());
  EXPECT_EQ((*replaced)->Encode("a", false), std::vector<int32_t>{2});
  j["normalizer"] = {{"type", "Prepend"}, {"prepend", "_"}};
  EXPECT_FALSE(Tokenizer::FromHuggingFaceText(j.dump(), "", "spm/tokenizer.json").ok());
}

// tokenizer.json: a TemplateProcessing post-processor that starts with a
// special token adds it as BOS; an unk_token the vocabulary lacks is none.
TEST(TokenizerMutantsTest, JsonBosFromThePostProcessor) {
  using Json = nlohmann::ordered_json;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    AppendUtf8(ByteToAlphabet(static_cast<uint8_t>(b)), &s);
    vocab[s] = b;
  }
  vocab["<s>"] = 256;
  Json j;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}, {"unk_token", "<nope>"}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", Json::array({Json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}};
  auto tok = Tokenizer::FromHuggingFaceText(j.dump(), "", "pp/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->bos_id(), 256);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_EQ((*tok)->unk_id(), -1);
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<missing>";
  auto missing = Tokenizer::FromHuggingFaceText(j.dump(), "", "pp/tokenizer.json");
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ((*missing)->bos_id(), -1);
  EXPECT_FALSE((*missing)->add_bos());
}

// A SentencePiece ("llama") vocabulary in a GGUF file without id keys gets
// llama.cpp's defaults: <unk> 0, <s> 1, </s> 2, BOS added.
TEST(TokenizerMutantsTest, GgufLlamaDefaults) {
  std::string bytes = "GGUF";
  auto put32 = [&](uint32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); };
  auto put64 = [&](uint64_t v) { bytes.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& s) {
    put64(s.size());
    bytes += s;
  };
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a"};
  put32(3);
  put64(0);  // tensors
  put64(3);  // metadata
  str("tokenizer.ggml.model");
  put32(8);
  str("llama");
  str("tokenizer.ggml.tokens");
  put32(9);
  put32(8);
  put64(tokens.size());
  for (const auto& t : tokens) str(t);
  str("tokenizer.ggml.scores");
  put32(9);
  put32(6);
  put64(tokens.size());
  for (float f : {0.0f, 0.0f, 0.0f, -1.0f}) bytes.append(reinterpret_cast<const char*>(&f), 4);
  const std::string path = ::testing::TempDir() + "tok_mutants_" + std::to_string(::getpid()) + ".gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  auto gguf = GgufFile::Open(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->model(), TokenizerModel::kSentencePieceBpe);
  EXPECT_EQ((*tok)->unk_id(), 0);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_FALSE((*tok)->add_eos());
  EXPECT_EQ((*tok)->Encode("a", false), std::vector<int32_t>{3});
}

// A word that is a whole token is taken as is only with ignore_merges (Llama
// 3); otherwise it is built by merges, and without a merge stays in pieces.
TEST(TokenizerMutantsTest, JsonIgnoreMerges) {
  using Json = nlohmann::ordered_json;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    AppendUtf8(ByteToAlphabet(static_cast<uint8_t>(b)), &s);
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  Json j;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}};
  auto merged = Tokenizer::FromHuggingFaceText(j.dump(), "", "im/tokenizer.json");
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ((*merged)->Encode("ab", false), (std::vector<int32_t>{'a', 'b'}));
  j["model"]["ignore_merges"] = true;
  auto whole = Tokenizer::FromHuggingFaceText(j.dump(), "", "im/tokenizer.json");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ((*whole)->Encode("ab", false), std::vector<int32_t>{256});
  EXPECT_EQ((*whole)->Encode("abc", false), (std::vector<int32_t>{'a', 'b', 'c'}));
}

}  // namespace
}  // namespace flashroll::engine
