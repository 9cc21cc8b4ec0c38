// Parity with Hugging Face tokenizers beyond the upstream vectors: the
// hand-picked and random strings of tests/data/tokenizer-vectors/extra, and
// the tokenizer.json loader on saved Hugging Face pipelines.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/format/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {
namespace {

const std::string kDir = "tests/data/tokenizer-vectors/";

struct Reference {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

std::vector<Reference> LoadReferences(const std::string& vocab) {
  std::ifstream in(kDir + "extra/" + vocab + ".jsonl");
  std::vector<Reference> refs;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    refs.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>(),
                    j["decoded"].get<std::string>()});
  }
  return refs;
}

std::unique_ptr<Tokenizer> LoadGguf(const std::string& vocab) {
  auto gguf = GgufFile::Open(kDir + "ggml-vocab-" + vocab + ".gguf");
  EXPECT_TRUE(gguf.ok()) << gguf.status().ToString();
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::FromGguf(**gguf);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(*tok) : nullptr;
}

void ExpectMatches(const Tokenizer& tok, const std::vector<Reference>& refs, const std::string& what) {
  size_t failures = 0;
  for (size_t i = 0; i < refs.size() && failures < 10; ++i) {
    std::vector<int32_t> got = tok.Encode(refs[i].text, /*parse_special=*/false);
    if (got != refs[i].ids) ++failures;
    EXPECT_EQ(got, refs[i].ids) << what << " case " << i << ": '" << refs[i].text << "'";
    EXPECT_EQ(tok.Decode(refs[i].ids), refs[i].decoded) << what << " case " << i;
  }
}

class TokenizerReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerReferenceTest, MatchesHuggingFace) {
  auto tok = LoadGguf(GetParam());
  ASSERT_NE(tok, nullptr);
  std::vector<Reference> refs = LoadReferences(GetParam());
  ASSERT_GE(refs.size(), 300u);
  ExpectMatches(*tok, refs, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerReferenceTest,
                         ::testing::Values("gpt-2", "llama-bpe", "qwen2", "llama-spm", "phi-3",
                                           "deepseek-llm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

class TokenizerJsonParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerJsonParityTest, LoadsAndMatchesGguf) {
  const std::string vocab = GetParam();
  const std::string dir = kDir + "hf/" + vocab + "/";
  auto hf = Tokenizer::FromHuggingFace(dir + "tokenizer.json", dir + "tokenizer_config.json");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  auto gguf = LoadGguf(vocab);
  ASSERT_NE(gguf, nullptr);
  EXPECT_EQ((*hf)->vocab_size(), gguf->vocab_size());
  EXPECT_EQ((*hf)->model(), gguf->model());
  EXPECT_EQ((*hf)->bos_id(), gguf->bos_id());
  EXPECT_EQ((*hf)->eos_id(), gguf->eos_id());
  EXPECT_EQ((*hf)->add_bos(), gguf->add_bos());
  ExpectMatches(**hf, LoadReferences(vocab), "tokenizer.json " + vocab);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerJsonParityTest, ::testing::Values("gpt-2", "llama-spm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace flashroll::engine
