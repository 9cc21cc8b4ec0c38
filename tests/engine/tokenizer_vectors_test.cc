// Every case of every vocabulary in tests/data/tokenizer-vectors (llama.cpp's
// vocab test files: GGUF vocabularies plus inputs and the ids Hugging Face
// tokenizers produce for them) must tokenize exactly.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/format/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {
namespace {

const char* const kVectorDir = "tests/data/tokenizer-vectors/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> LoadCases(const std::string& vocab) {
  std::string inp = ReadAll(kVectorDir + vocab + ".gguf.inp");
  std::string out = ReadAll(kVectorDir + vocab + ".gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    size_t end = inp.find(sep, pos);
    if (end == std::string::npos) end = inp.size();
    texts.push_back(inp.substr(pos, end - pos));
    pos = end + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    Case c;
    if (i < texts.size()) c.text = texts[i];
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
    ++i;
  }
  EXPECT_EQ(texts.size(), cases.size()) << vocab;
  return cases;
}

class TokenizerVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectorsTest, EveryCaseMatches) {
  const std::string vocab = GetParam();
  auto gguf = GgufFile::Open(kVectorDir + vocab + ".gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::vector<Case> cases = LoadCases(vocab);
  ASSERT_EQ(cases.size(), 46u);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int32_t> got = (*tok)->Encode(cases[i].text, /*parse_special=*/false);
    EXPECT_EQ(got, cases[i].ids) << vocab << " case " << i << ": '" << cases[i].text << "'";
    EXPECT_EQ((*tok)->Decode(got), cases[i].text) << vocab << " case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerVectorsTest,
                         ::testing::Values("ggml-vocab-gpt-2", "ggml-vocab-llama-bpe",
                                           "ggml-vocab-qwen2", "ggml-vocab-llama-spm",
                                           "ggml-vocab-phi-3", "ggml-vocab-deepseek-llm",
                                           "ggml-vocab-deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param.substr(sizeof("ggml-vocab-") - 1);
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace flashroll::engine
