// End-to-end test of `flashroll generate --prompt` on a GGUF file, where the
// tokenizer comes from the file's tokenizer.ggml.* metadata rather than a
// tokenizer.json. The test writes a one-layer llama model with random F32
// weights and a byte-level BPE vocabulary: the 256 GPT-2 byte symbols, four
// merges that build "hello", and an end-of-text token.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/run_flashroll.h"
#include "tests/test_files.h"

namespace {

using flashroll::testing::OneLine;

using flashroll::testing::CommandResult;
using flashroll::testing::RunFlashroll;
using Json = nlohmann::json;

// ---- A minimal GGUF v3 writer (little-endian host).
class GgufWriter {
 public:
  void Str(const std::string& key, const std::string& v) { Key(key, 8), String(&kv_, v), ++kv_count_; }
  void U32(const std::string& key, uint32_t v) { Key(key, 4), Raw(&kv_, &v, 4), ++kv_count_; }
  void F32(const std::string& key, float v) { Key(key, 6), Raw(&kv_, &v, 4), ++kv_count_; }
  void Bool(const std::string& key, bool v) {
    const uint8_t b = v ? 1 : 0;
    Key(key, 7), Raw(&kv_, &b, 1), ++kv_count_;
  }
  void Strings(const std::string& key, const std::vector<std::string>& v) {
    ArrayHeader(key, 8, v.size());
    for (const std::string& s : v) String(&kv_, s);
  }
  void Ints(const std::string& key, const std::vector<int32_t>& v) {
    ArrayHeader(key, 5, v.size());
    for (int32_t i : v) Raw(&kv_, &i, 4);
  }

  // An F32 tensor; `dims` in GGUF order (innermost first).
  void Tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& values) {
    while (data_.size() % 32) data_.push_back('\0');
    String(&info_, name);
    const uint32_t n = static_cast<uint32_t>(dims.size());
    Raw(&info_, &n, 4);
    for (uint64_t d : dims) Raw(&info_, &d, 8);
    const uint32_t f32 = 0;
    Raw(&info_, &f32, 4);
    const uint64_t offset = data_.size();
    Raw(&info_, &offset, 8);
    Raw(&data_, values.data(), values.size() * 4);
    ++tensor_count_;
  }

  std::string Bytes() const {
    std::string out = "GGUF";
    const uint32_t version = 3;
    Raw(&out, &version, 4);
    Raw(&out, &tensor_count_, 8);
    Raw(&out, &kv_count_, 8);
    out += kv_ + info_;
    while (out.size() % 32) out.push_back('\0');
    return out + data_;
  }

 private:
  static void Raw(std::string* out, const void* p, size_t n) { out->append(static_cast<const char*>(p), n); }
  static void String(std::string* out, const std::string& s) {
    const uint64_t n = s.size();
    Raw(out, &n, 8);
    *out += s;
  }
  void Key(const std::string& key, uint32_t type) {
    String(&kv_, key);
    Raw(&kv_, &type, 4);
  }
  void ArrayHeader(const std::string& key, uint32_t element_type, uint64_t count) {
    Key(key, 9);
    Raw(&kv_, &element_type, 4);
    Raw(&kv_, &count, 8);
    ++kv_count_;
  }

  std::string kv_, info_, data_;
  uint64_t kv_count_ = 0, tensor_count_ = 0;
};

// UTF-8 of a code point below 0x800 (all the byte symbols are).
std::string Utf8(uint32_t cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves,
// the other 68 bytes for U+0100 onwards, in byte order.
std::vector<std::string> ByteSymbols() {
  std::vector<std::string> symbols;
  uint32_t next = 0x100;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    symbols.push_back(Utf8(printable ? b : next++));
  }
  return symbols;
}

// The vocabulary: ids 0-255 are bytes, then the merged tokens, then end-of-text.
const char* const kMerged[] = {"he", "ll", "hell", "hello"};
constexpr int32_t kHelloId = 259;
constexpr int32_t kEosId = 260;
constexpr uint64_t kVocab = 261;

// What the model's tokens decode to, end-of-text skipped.
std::string Detokenize(const Json& ids) {
  std::string out;
  for (const Json& id : ids) {
    const int32_t i = id.get<int32_t>();
    if (i < 256) {
      out.push_back(static_cast<char>(i));
    } else if (i < kEosId) {
      out += kMerged[i - 256];
    }
  }
  return out;
}

// Deterministic weights in [-scale, scale].
std::vector<float> Random(size_t n, float scale, uint64_t* state) {
  std::vector<float> v(n);
  for (float& x : v) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = scale * (static_cast<float>(*state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
  }
  return v;
}

// A one-layer llama GGUF with the vocabulary above; `merges` lets a test break it.
std::string ModelBytes(const std::vector<std::string>& merges) {
  constexpr uint64_t kHidden = 16, kHeads = 2, kKvHeads = 1, kHeadDim = 8, kFfn = 32;
  GgufWriter w;
  w.Str("general.architecture", "llama");
  w.U32("llama.context_length", 64);
  w.U32("llama.embedding_length", kHidden);
  w.U32("llama.block_count", 1);
  w.U32("llama.feed_forward_length", kFfn);
  w.U32("llama.attention.head_count", kHeads);
  w.U32("llama.attention.head_count_kv", kKvHeads);
  w.F32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.Str("tokenizer.ggml.model", "gpt2");
  w.Str("tokenizer.ggml.pre", "qwen2");
  std::vector<std::string> tokens = ByteSymbols();
  for (const char* m : kMerged) tokens.push_back(m);
  tokens.push_back("<|endoftext|>");
  w.Strings("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(kVocab, 1);  // normal
  types[kEosId] = 3;                      // control
  w.Ints("tokenizer.ggml.token_type", types);
  w.Strings("tokenizer.ggml.merges", merges);
  w.U32("tokenizer.ggml.eos_token_id", kEosId);
  w.Bool("tokenizer.ggml.add_bos_token", false);

  uint64_t state = 42;
  const std::vector<float> ones(kHidden, 1.0f);
  w.Tensor("token_embd.weight", {kHidden, kVocab}, Random(kHidden * kVocab, 1.0f, &state));
  w.Tensor("output_norm.weight", {kHidden}, ones);
  // A zero row gives end-of-text logit 0 while the others spread around it,
  // so greedy decoding does not stop early.
  std::vector<float> output = Random(kHidden * kVocab, 1.0f, &state);
  std::fill(output.begin() + kEosId * kHidden, output.begin() + (kEosId + 1) * kHidden, 0.0f);
  w.Tensor("output.weight", {kHidden, kVocab}, output);
  w.Tensor("blk.0.attn_norm.weight", {kHidden}, ones);
  w.Tensor("blk.0.ffn_norm.weight", {kHidden}, ones);
  w.Tensor("blk.0.attn_q.weight", {kHidden, kHeads * kHeadDim}, Random(kHidden * kHeads * kHeadDim, 0.5f, &state));
  w.Tensor("blk.0.attn_k.weight", {kHidden, kKvHeads * kHeadDim}, Random(kHidden * kKvHeads * kHeadDim, 0.5f, &state));
  w.Tensor("blk.0.attn_v.weight", {kHidden, kKvHeads * kHeadDim}, Random(kHidden * kKvHeads * kHeadDim, 0.5f, &state));
  w.Tensor("blk.0.attn_output.weight", {kHeads * kHeadDim, kHidden}, Random(kHidden * kHeads * kHeadDim, 0.5f, &state));
  w.Tensor("blk.0.ffn_gate.weight", {kHidden, kFfn}, Random(kHidden * kFfn, 0.5f, &state));
  w.Tensor("blk.0.ffn_up.weight", {kHidden, kFfn}, Random(kHidden * kFfn, 0.5f, &state));
  w.Tensor("blk.0.ffn_down.weight", {kFfn, kHidden}, Random(kHidden * kFfn, 0.5f, &state));
  return w.Bytes();
}

const std::vector<std::string> kMerges = {"h e", "l l", "he ll", "hell o"};

class EngineGgufPromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/engine_gguf_prompt_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    for (const std::string& f : written_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    written_.push_back(dir_ + "/" + name);
    std::ofstream(written_.back(), std::ios::binary) << bytes;
    return written_.back();
  }

  std::string dir_;
  std::vector<std::string> written_;
};

// Exactly one line of output.
TEST_F(EngineGgufPromptTest, PromptIsTokenisedWithTheGgufVocabulary) {
  const std::string model = Write("model.gguf", ModelBytes(kMerges));
  CommandResult text = RunFlashroll("generate --model " + model + " --prompt hello --max-tokens 4");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  ASSERT_GT(text.output.size(), 1u) << text.output;

  CommandResult json = RunFlashroll("generate --model " + model + " --prompt hello --max-tokens 4 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const Json out = Json::parse(json.output);
  ASSERT_EQ(out["tokens"].size(), 4u) << json.output;
  EXPECT_EQ(out["text"].get<std::string>(), Detokenize(out["tokens"]));
  EXPECT_EQ(text.output, Detokenize(out["tokens"]) + "\n");

  // The merges make "hello" one token: the same prompt given as ids
  // continues identically.
  CommandResult ids = RunFlashroll("generate --model " + model + " --tokens " + std::to_string(kHelloId) +
                                   " --max-tokens 4 --json");
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  EXPECT_EQ(Json::parse(ids.output)["tokens"], out["tokens"]);
}

TEST_F(EngineGgufPromptTest, BadInputExits2WithOneLine) {
  const std::string model = Write("model.gguf", ModelBytes(kMerges));
  CommandResult r = RunFlashroll("generate --model " + model + " --max-tokens 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;

  // A malformed merge is only read when a prompt needs the tokenizer.
  std::vector<std::string> bad_merges = kMerges;
  bad_merges.push_back("hello");
  const std::string bad = Write("bad_merges.gguf", ModelBytes(bad_merges));
  r = RunFlashroll("generate --model " + bad + " --prompt hello --max-tokens 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find("tokenizer.ggml.merges"), std::string::npos) << r.output;
  r = RunFlashroll("generate --model " + bad + " --tokens " + std::to_string(kHelloId) + " --max-tokens 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  const std::string bytes = ModelBytes(kMerges);
  const std::string truncated = Write("truncated.gguf", bytes.substr(0, bytes.size() / 2));
  r = RunFlashroll("generate --model " + truncated + " --prompt hello --max-tokens 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(OneLine(r.output)) << r.output;
  EXPECT_NE(r.output.find(truncated), std::string::npos) << r.output;
}

}  // namespace
