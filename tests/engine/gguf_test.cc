// GGUF parsing: the real vocabulary files, synthetic files with tensors, and
// truncated or corrupted copies that must fail with an error, never crash.
#include "engine/format/gguf.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll::engine {
namespace {

const std::string kVectors = "tests/data/tokenizer-vectors/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  std::string path = ::testing::TempDir() + "gguf_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Builds GGUF v3 files byte by byte.
class Builder {
 public:
  template <typename T>
  void Put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void Str(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes_ += s;
  }
  void Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes_ += "GGUF";
    Put<uint32_t>(version);
    Put<uint64_t>(n_tensors);
    Put<uint64_t>(n_kv);
  }
  void KvU32(const std::string& key, uint32_t v) {
    Str(key);
    Put<uint32_t>(4);
    Put<uint32_t>(v);
  }
  void KvString(const std::string& key, const std::string& v) {
    Str(key);
    Put<uint32_t>(8);
    Str(v);
  }
  void KvStrings(const std::string& key, const std::vector<std::string>& v) {
    Str(key);
    Put<uint32_t>(9);
    Put<uint32_t>(8);
    Put<uint64_t>(v.size());
    for (const auto& s : v) Str(s);
  }
  void KvF32s(const std::string& key, const std::vector<float>& v) {
    Str(key);
    Put<uint32_t>(9);
    Put<uint32_t>(6);
    Put<uint64_t>(v.size());
    for (float f : v) Put<float>(f);
  }
  void Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    Str(name);
    Put<uint32_t>(dims.size());
    for (uint64_t d : dims) Put<uint64_t>(d);
    Put<uint32_t>(type);
    Put<uint64_t>(offset);
  }
  void Align(size_t a) {
    while (bytes_.size() % a != 0) bytes_.push_back('\0');
  }
  void Data(size_t n, char fill) { bytes_.append(n, fill); }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

// A file with metadata of several types and three tensors; alignment 64.
std::string ModelFile() {
  Builder b;
  b.Header(3, 5);
  b.KvString("general.architecture", "llama");
  b.KvU32("general.alignment", 64);
  b.KvU32("llama.block_count", 2);
  b.KvStrings("tokenizer.ggml.tokens", {"a", "b", "", "ü"});
  b.KvF32s("tokenizer.ggml.scores", {0.5f, -1.0f, 2.0f, 0.0f});
  // F32 [4, 3]: 48 bytes; Q8_0 [64, 2]: 2*2*34 = 136 bytes; BF16 [8]: 16 bytes.
  b.Tensor("w.f32", {4, 3}, 0, 0);
  b.Tensor("w.q8", {64, 2}, 8, 64);
  b.Tensor("w.bf16", {8}, 30, 256);
  b.Align(64);
  b.Data(48, 'A');
  b.Align(64);  // 64
  b.Data(136, 'B');
  b.Align(64);  // 256
  b.Data(16, 'C');
  return b.bytes();
}

TEST(GgufFileTest, ParsesVocabularyFiles) {
  struct Expect {
    const char* vocab;
    const char* model;
    uint64_t tokens;
    int64_t bos;
  };
  const Expect expects[] = {
      {"gpt-2", "gpt2", 50257, 50256},           {"llama-bpe", "gpt2", 128256, 128000},
      {"qwen2", "gpt2", 151936, 151643},         {"llama-spm", "llama", 32000, 1},
      {"deepseek-coder", "gpt2", 32256, 32013},  {"deepseek-llm", "gpt2", 102400, 100000},
      {"phi-3", "llama", 32064, 1},
  };
  for (const Expect& e : expects) {
    auto f = GgufFile::Open(kVectors + "ggml-vocab-" + e.vocab + ".gguf");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const GgufFile& g = **f;
    EXPECT_EQ(g.version(), 3u);
    EXPECT_TRUE(g.tensors().empty());
    EXPECT_EQ(g.alignment(), 32u);
    auto model = g.GetString("tokenizer.ggml.model");
    ASSERT_TRUE(model.ok());
    EXPECT_EQ(*model, e.model);
    auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(tokens->size(), e.tokens) << e.vocab;
    EXPECT_EQ(*g.ArraySize("tokenizer.ggml.tokens"), e.tokens);
    EXPECT_EQ(*g.GetInt("tokenizer.ggml.bos_token_id"), e.bos);
    auto types = g.GetIntArray("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.ok());
    EXPECT_EQ(types->size(), e.tokens);
  }
}

TEST(GgufFileTest, MetadataGettersCheckTypes) {
  auto f = GgufFile::Open(kVectors + "ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetInt("llama.block_count"), 32);
  EXPECT_NEAR(*g.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  EXPECT_TRUE(*g.GetBool("tokenizer.ggml.add_bos_token"));
  auto scores = g.GetFloatArray("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.ok());
  EXPECT_EQ(scores->size(), 32000u);
  auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[3], "<0x00>");

  auto missing = g.GetInt("no.such.key");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("no.such.key"), std::string::npos);
  auto wrong = g.GetInt("general.architecture");
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("general.architecture"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("string"), std::string::npos);
  EXPECT_FALSE(g.GetStringArray("tokenizer.ggml.scores").ok());
  EXPECT_FALSE(g.GetFloatArray("tokenizer.ggml.tokens").ok());
  EXPECT_FALSE(g.GetBool("llama.block_count").ok());
}

TEST(GgufFileTest, ParsesTensors) {
  std::string path = WriteTemp("model.gguf", ModelFile());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.alignment(), 64u);
  ASSERT_EQ(g.tensors().size(), 3u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  const GgufTensor* f32 = g.FindTensor("w.f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dims, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(f32->type, GgmlType::kF32);
  EXPECT_EQ(f32->num_elements, 12);
  EXPECT_EQ(f32->size_bytes, 48u);
  EXPECT_EQ(f32->file_offset, g.data_offset());
  EXPECT_EQ(f32->data[0], 'A');
  EXPECT_EQ(f32->data[47], 'A');
  const GgufTensor* q8 = g.FindTensor("w.q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, GgmlType::kQ8_0);
  EXPECT_EQ(q8->size_bytes, 136u);
  EXPECT_EQ(q8->data[0], 'B');
  EXPECT_EQ(q8->data[135], 'B');
  const GgufTensor* bf16 = g.FindTensor("w.bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->size_bytes, 16u);
  EXPECT_EQ(bf16->data[15], 'C');
  EXPECT_TRUE(GgmlTypeSupported(bf16->type));
  EXPECT_EQ(g.FindTensor("nope"), nullptr);
  auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, (std::vector<std::string_view>{"a", "b", "", "ü"}));
  ::unlink(path.c_str());
}

TEST(GgufFileTest, TypeTraits) {
  EXPECT_EQ(FindGgmlTypeTraits(2)->block_size, 32);
  EXPECT_EQ(FindGgmlTypeTraits(2)->type_size, 18);
  EXPECT_EQ(FindGgmlTypeTraits(12)->type_size, 144);
  EXPECT_EQ(FindGgmlTypeTraits(4), nullptr);  // removed Q4_2
  EXPECT_FALSE(GgmlTypeSupported(GgmlType::kQ4_K));
  EXPECT_TRUE(GgmlTypeSupported(GgmlType::kQ4_0));
}

// Every truncation of a file with tensors fails with an error naming the file.
TEST(GgufFileTest, TruncatedModelFails) {
  std::string full = ModelFile();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::string path = WriteTemp("trunc.gguf", full.substr(0, cut));
    auto f = GgufFile::Open(path);
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
    ::unlink(path.c_str());
  }
}

TEST(GgufFileTest, TruncatedVocabularyFails) {
  std::string full = ReadAll(kVectors + "ggml-vocab-llama-spm.gguf");
  auto whole = GgufFile::Open(kVectors + "ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(whole.ok());
  // Cutting anywhere before the end of the metadata must fail.
  uint64_t must_fail_below = (*whole)->data_offset() - (*whole)->alignment();
  std::mt19937 rng(7);
  std::vector<size_t> cuts = {0, 3, 4, 7, 8, 15, 16, 23, 24, 30, 100};
  for (int i = 0; i < 200; ++i) cuts.push_back(rng() % must_fail_below);
  for (size_t cut : cuts) {
    std::string path = WriteTemp("vtrunc.gguf", full.substr(0, cut));
    auto f = GgufFile::Open(path);
    EXPECT_FALSE(f.ok()) << "cut at " << cut;
    if (!f.ok()) {
      EXPECT_NE(f.status().message().find("byte offset"), std::string::npos) << f.status().ToString();
    }
    ::unlink(path.c_str());
  }
}

// Random byte corruption: any outcome but a crash (run under ASan in CI).
TEST(GgufFileTest, CorruptedCopiesDoNotCrash) {
  std::mt19937 rng(42);
  const std::string inputs[] = {ModelFile(), ReadAll(kVectors + "ggml-vocab-llama-spm.gguf").substr(0, 4096)};
  for (const std::string& base : inputs) {
    for (int iter = 0; iter < 300; ++iter) {
      std::string bytes = base;
      int flips = 1 + rng() % 4;
      for (int k = 0; k < flips; ++k) {
        // Bias toward the header and early metadata, where lengths live.
        size_t pos = (rng() % 2) ? rng() % std::min<size_t>(bytes.size(), 256) : rng() % bytes.size();
        bytes[pos] = static_cast<char>(rng());
      }
      std::string path = WriteTemp("corrupt.gguf", bytes);
      auto f = GgufFile::Open(path);
      if (f.ok()) {
        // Whatever parsed must be readable without faults.
        for (std::string_view key : (*f)->Keys()) {
          auto type = (*f)->TypeOf(key);
          ASSERT_TRUE(type.ok());
          if (*type == GgufType::kArray) {
            (void)(*f)->GetStringArray(key);
            (void)(*f)->GetIntArray(key);
            (void)(*f)->GetFloatArray(key);
          }
        }
        for (const GgufTensor& t : (*f)->tensors()) {
          volatile uint8_t sink = t.size_bytes ? t.data[t.size_bytes - 1] : 0;
          (void)sink;
        }
      }
      ::unlink(path.c_str());
    }
  }
}

Status OpenBytes(const std::string& name, const std::string& bytes) {
  std::string path = WriteTemp(name, bytes);
  auto f = GgufFile::Open(path);
  ::unlink(path.c_str());
  return f.ok() ? Status::Ok() : f.status();
}

TEST(GgufFileTest, SpecificCorruptions) {
  {
    Builder b;  // string length claims 2^62 bytes
    b.Header(0, 1);
    b.Str("general.name");
    b.Put<uint32_t>(8);
    b.Put<uint64_t>(uint64_t{1} << 62);
    b.bytes() += "xx";
    Status s = OpenBytes("len.gguf", b.bytes());
    EXPECT_EQ(s.code(), Code::kCorruption);
    EXPECT_NE(s.message().find("general.name"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("byte offset 48"), std::string::npos) << s.ToString();
  }
  {
    Builder b;  // array count claims 2^60 uint32s
    b.Header(0, 1);
    b.Str("arr");
    b.Put<uint32_t>(9);
    b.Put<uint32_t>(4);
    b.Put<uint64_t>(uint64_t{1} << 60);
    Status s = OpenBytes("arr.gguf", b.bytes());
    EXPECT_EQ(s.code(), Code::kCorruption);
    EXPECT_NE(s.message().find("'arr'"), std::string::npos) << s.ToString();
  }
  {
    Builder b;  // tensor count that cannot fit
    b.Header(uint64_t{1} << 50, 0);
    EXPECT_FALSE(OpenBytes("count.gguf", b.bytes()).ok());
  }
  {
    Builder b;
    b.bytes() = "GGUF";
    b.Put<uint32_t>(1);
    b.Put<uint64_t>(0);
    b.Put<uint64_t>(0);
    Status s = OpenBytes("v1.gguf", b.bytes());
    EXPECT_NE(s.message().find("version 1"), std::string::npos) << s.ToString();
  }
  EXPECT_NE(OpenBytes("magic.gguf", "GGUX0000000000000000000000").message().find("magic"), std::string::npos);
  {
    Builder b;  // duplicate key
    b.Header(0, 2);
    b.KvU32("k", 1);
    b.KvU32("k", 2);
    EXPECT_NE(OpenBytes("dup.gguf", b.bytes()).message().find("duplicate"), std::string::npos);
  }
  auto tensor_file = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    Builder b;
    b.Header(1, 0);
    b.Tensor("t", std::move(dims), type, offset);
    b.Align(32);
    b.Data(data, 'x');
    return b.bytes();
  };
  EXPECT_TRUE(OpenBytes("ok.gguf", tensor_file({8}, 0, 0, 32)).ok());
  Status past = OpenBytes("past.gguf", tensor_file({8}, 0, 0, 31));
  EXPECT_NE(past.message().find("tensor 't'"), std::string::npos) << past.ToString();
  EXPECT_NE(OpenBytes("dims.gguf", tensor_file({1, 1, 1, 1, 1}, 0, 0, 32)).message().find("dimensions"),
            std::string::npos);
  EXPECT_NE(OpenBytes("type.gguf", tensor_file({8}, 99, 0, 32)).message().find("ggml type 99"),
            std::string::npos);
  EXPECT_NE(OpenBytes("align.gguf", tensor_file({8}, 0, 4, 64)).message().find("alignment"),
            std::string::npos);
  EXPECT_NE(OpenBytes("block.gguf", tensor_file({33}, 8, 0, 64)).message().find("block size"),
            std::string::npos);
  Status overflow = OpenBytes("ovf.gguf", tensor_file({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 32));
  EXPECT_NE(overflow.message().find("overflow"), std::string::npos) << overflow.ToString();
  {
    Builder b;  // general.alignment not a power of two
    b.Header(0, 1);
    b.KvU32("general.alignment", 48);
    EXPECT_NE(OpenBytes("a48.gguf", b.bytes()).message().find("power of two"), std::string::npos);
  }
}

TEST(GgufFileTest, MissingFileIsNotFound) {
  auto f = GgufFile::Open("tests/data/does-not-exist.gguf");
  EXPECT_EQ(f.status().code(), Code::kNotFound);
  EXPECT_NE(f.status().message().find("does-not-exist.gguf"), std::string::npos);
}

}  // namespace
}  // namespace flashroll::engine
