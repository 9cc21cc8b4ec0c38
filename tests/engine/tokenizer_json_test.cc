// The tokenizer.json loader on small synthetic files: what it accepts, and
// that malformed files give a Status naming the file and the JSON key.
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/byte_alphabet.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace flashroll::engine {
namespace {

// Named apart from common/json.h's Json: a unity source shares one namespace.
using OrderedJson = nlohmann::ordered_json;

std::string Alphabet(uint8_t b) {
  std::string s;
  AppendUtf8(ByteToAlphabet(b), &s);
  return s;
}

// A byte-level BPE tokenizer.json: the 256 byte tokens, "Ġt" and "he" by
// merges, one special and one plain added token.
OrderedJson SmallTokenizer() {
  OrderedJson vocab = OrderedJson::object();
  for (int b = 0; b < 256; ++b) vocab[Alphabet(static_cast<uint8_t>(b))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  OrderedJson j;
  j["version"] = "1.0";
  j["added_tokens"] = OrderedJson::array({
      {{"id", 259}, {"content", "<|im_end|>"}, {"special", true}},
      {{"id", 260}, {"content", "[X]"}, {"special", false}},
  });
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", OrderedJson::array({"Ġ t", "h e", "Ġt he"})}};
  return j;
}

Result<std::unique_ptr<Tokenizer>> Load(const OrderedJson& j, const std::string& config = "") {
  return Tokenizer::FromHuggingFaceText(j.dump(), config, "mem/tokenizer.json");
}

TEST(TokenizerJsonTest, LoadsByteLevelBpe) {
  auto tok = Load(SmallTokenizer(), R"({"eos_token": {"content": "<|im_end|>"}, "chat_template": "T"})");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 261);
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizerKind::kGpt2);
  EXPECT_EQ(t.eos_id(), 259);
  EXPECT_EQ(t.chat_template(), "T");
  EXPECT_EQ(t.Encode(" the", false), std::vector<int32_t>{258});
  EXPECT_EQ(t.Encode("he the", false), (std::vector<int32_t>{257, 258}));
  // Control tokens only with parse_special; plain added tokens always.
  EXPECT_EQ(t.Encode("<|im_end|>", true), std::vector<int32_t>{259});
  EXPECT_EQ(t.Encode("<|im_end|>", false).size(), 10u);
  EXPECT_EQ(t.Encode("a[X]b", false), (std::vector<int32_t>{'a', 260, 'b'}));  // byte b has id b
  EXPECT_EQ(t.Decode(t.Encode("he the<|im_end|>", true)), "he the<|im_end|>");
  EXPECT_EQ(t.Decode(t.Encode("he the<|im_end|>", true), /*skip_special=*/true), "he the");
  EXPECT_TRUE(t.IsEndOfGeneration(259));
}

TEST(TokenizerJsonTest, SplitPatternsSelectThePreTokenizer) {
  OrderedJson j = SmallTokenizer();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       OrderedJson::array({{{"type", "Split"},
                     {"pattern",
                      {{"Regex",
                        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  auto tok = Load(j);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->pre_tokenizer(), PreTokenizerKind::kQwen2);
}

// Each malformed file fails with the file name and the offending key in the message.
TEST(TokenizerJsonTest, MalformedFilesNameFileAndKey) {
  struct Bad {
    const char* what;
    OrderedJson json;
    const char* key;
    Code code;
  };
  std::vector<Bad> bad;
  auto with = [](auto edit) {
    OrderedJson j = SmallTokenizer();
    edit(j);
    return j;
  };
  bad.push_back({"no model", with([](OrderedJson& j) { j.erase("model"); }), "model", Code::kInvalidArgument});
  bad.push_back({"vocab not object", with([](OrderedJson& j) { j["model"]["vocab"] = 3; }), "model.vocab",
                 Code::kInvalidArgument});
  bad.push_back({"id not int", with([](OrderedJson& j) { j["model"]["vocab"]["he"] = "x"; }), "model.vocab.he",
                 Code::kInvalidArgument});
  bad.push_back({"huge id", with([](OrderedJson& j) { j["model"]["vocab"]["he"] = 1LL << 40; }), "model.vocab.he",
                 Code::kInvalidArgument});
  bad.push_back({"negative id", with([](OrderedJson& j) { j["model"]["vocab"]["he"] = -1; }), "model.vocab.he",
                 Code::kInvalidArgument});
  bad.push_back({"bad merge", with([](OrderedJson& j) { j["model"]["merges"][0] = "nospace"; }), "model.merges[0]",
                 Code::kInvalidArgument});
  bad.push_back({"merge part unknown", with([](OrderedJson& j) { j["model"]["merges"][1] = "h zz"; }), "merge 1",
                 Code::kInvalidArgument});
  bad.push_back({"wordpiece", with([](OrderedJson& j) { j["model"]["type"] = "WordPiece"; }), "model.type",
                 Code::kUnimplemented});
  bad.push_back({"pre type", with([](OrderedJson& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }),
                 "pre_tokenizer.type", Code::kUnimplemented});
  bad.push_back({"unknown split", with([](OrderedJson& j) {
                   j["pre_tokenizer"] = {{"type", "Sequence"},
                                         {"pretokenizers", OrderedJson::array({{{"type", "Split"},
                                                                         {"pattern", {{"Regex", "\\d+"}}},
                                                                         {"behavior", "Isolated"}},
                                                                        {{"type", "ByteLevel"},
                                                                         {"use_regex", false}}})}};
                 }),
                 "\\d+", Code::kUnimplemented});
  bad.push_back({"added token no id", with([](OrderedJson& j) { j["added_tokens"][0].erase("id"); }),
                 "added_tokens[0].id", Code::kInvalidArgument});
  bad.push_back({"normalizer", with([](OrderedJson& j) { j["normalizer"] = {{"type", "Lowercase"}}; }),
                 "normalizer.type", Code::kUnimplemented});
  for (const Bad& b : bad) {
    auto tok = Load(b.json);
    ASSERT_FALSE(tok.ok()) << b.what;
    EXPECT_EQ(tok.status().code(), b.code) << b.what << ": " << tok.status().ToString();
    EXPECT_NE(tok.status().message().find("mem/tokenizer.json"), std::string::npos) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find(b.key), std::string::npos) << b.what << ": " << tok.status().ToString();
  }
}

TEST(TokenizerJsonTest, MalformedTextAndConfig) {
  auto parse = Tokenizer::FromHuggingFaceText("{\"model\": [", "", "mem/tokenizer.json");
  ASSERT_FALSE(parse.ok());
  EXPECT_NE(parse.status().message().find("mem/tokenizer.json"), std::string::npos);
  EXPECT_NE(parse.status().message().find("byte"), std::string::npos) << parse.status().ToString();
  auto cfg = Load(SmallTokenizer(), R"({"bos_token": "<nope>"})");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("bos_token"), std::string::npos) << cfg.status().ToString();
  auto cfg_type = Load(SmallTokenizer(), R"({"add_bos_token": "yes"})");
  ASSERT_FALSE(cfg_type.ok());
  EXPECT_NE(cfg_type.status().message().find("add_bos_token"), std::string::npos);
  auto missing = Tokenizer::FromHuggingFace("tests/data/none/tokenizer.json", "");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

// Random mutations of a valid file: errors or tokenizers, never a crash.
TEST(TokenizerJsonTest, MutatedFilesDoNotCrash) {
  const std::string base = SmallTokenizer().dump();
  std::mt19937 rng(3);
  const char kBytes[] = "{}[]\":,0123456789-.etrufanl \\xX";
  for (int i = 0; i < 500; ++i) {
    std::string text = base;
    int edits = 1 + rng() % 3;
    for (int k = 0; k < edits; ++k) {
      size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[pos] = kBytes[rng() % (sizeof(kBytes) - 1)]; break;
        case 1: text.erase(pos, 1 + rng() % 8); break;
        default: text.insert(pos, 1, kBytes[rng() % (sizeof(kBytes) - 1)]);
      }
    }
    auto tok = Tokenizer::FromHuggingFaceText(text, "", "mutated");
    if (tok.ok()) (void)(*tok)->Decode((*tok)->Encode("the <|im_end|> [X] \xF0\x9F\xA6\x99", true));
  }
}

}  // namespace
}  // namespace flashroll::engine
