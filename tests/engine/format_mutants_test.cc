// Edges of the model file parsers (engine/format/): each case sits on a check's
// boundary, so that a check loosened or removed (scripts/mutate.py) fails here.
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/format/gguf.h"
#include "engine/format/hf_config.h"
#include "engine/format/safetensors.h"

namespace flashroll::engine {
namespace {

// ---------------------------------------------------------------- safetensors

std::string Image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

Result<std::vector<SafetensorsTensor>> Parse(const std::string& image) {
  return ParseSafetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "m.safetensors");
}

std::string One(const std::string& dtype, const std::string& shape, uint64_t begin, uint64_t end) {
  return R"({"w": {"dtype": ")" + dtype + R"(", "shape": )" + shape + R"(, "data_offsets": [)" +
         std::to_string(begin) + ", " + std::to_string(end) + "]}}";
}

TEST(FormatMutantsTest, SafetensorsSpanMayEndAtTheDataEndButNotOneBytePast) {
  const std::string data(16, 'x');
  // Ends exactly at the end of the 16-byte data section: fine.
  auto last = Parse(Image(One("F32", "[2]", 8, 16), data));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ((*last)[0].size_bytes, 8u);
  // The same 8 bytes one further: the span ends one byte past the data.
  auto past = Parse(Image(One("F32", "[2]", 9, 17), data));
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), Code::kCorruption);
  EXPECT_NE(past.status().message().find("data_offsets [9, 17] lie outside the data section of 16 bytes"),
            std::string::npos)
      << past.status().ToString();
  // Begin after end, even with a matching length of zero elements.
  auto backwards = Parse(Image(One("F32", "[0]", 8, 4), data));
  ASSERT_FALSE(backwards.ok());
  EXPECT_EQ(backwards.status().code(), Code::kCorruption);
  auto empty = Parse(Image(One("F32", "[0]", 16, 16), data));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)[0].num_elements, 0);
}

TEST(FormatMutantsTest, SafetensorsSizesAndPointers) {
  const std::string data(32, 'y');
  const std::string image = Image(One("F16", "[2, 3]", 4, 16), data);
  auto t = Parse(image);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const SafetensorsTensor& w = (*t)[0];
  EXPECT_EQ(w.num_elements, 6);
  EXPECT_EQ(w.size_bytes, 12u);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  const uint64_t data_start = image.size() - data.size();
  EXPECT_EQ(w.file_offset, data_start + 4);
  EXPECT_EQ(w.data, reinterpret_cast<const uint8_t*>(image.data()) + data_start + 4);
  ASSERT_TRUE(w.dtype.has_value());
  EXPECT_EQ(*w.dtype, kernels::DType::kF16);
  // Element sizes of the dtypes that are only stored, not computed with.
  for (const auto& [dtype, size] : std::vector<std::pair<std::string, int>>{
           {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
           {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"BF16", 2}, {"F32", 4}}) {
    auto ok = Parse(Image(One(dtype, "[3]", 0, 3 * size), data));
    EXPECT_TRUE(ok.ok()) << dtype << ": " << ok.status().ToString();
    auto off = Parse(Image(One(dtype, "[3]", 0, 3 * size + 1), data));
    EXPECT_FALSE(off.ok()) << dtype;
  }
  auto i64 = Parse(Image(One("I64", "[1]", 0, 8), data));
  ASSERT_TRUE(i64.ok());
  EXPECT_FALSE((*i64)[0].dtype.has_value());
  auto bf16 = Parse(Image(One("BF16", "[1]", 0, 2), data));
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(*(*bf16)[0].dtype, kernels::DType::kBF16);
  auto f32 = Parse(Image(One("F32", "[1]", 0, 4), data));
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(*(*f32)[0].dtype, kernels::DType::kF32);
  EXPECT_FALSE(Parse(Image(One("f32", "[1]", 0, 4), data)).ok());
}

TEST(FormatMutantsTest, SafetensorsHeaderBounds) {
  // Eight bytes of length and an empty object: no tensors, fine.
  auto empty = Parse(Image("{}", ""));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(Parse(std::string(7, '\0')).status().code(), Code::kCorruption);
  // A header length one past the file's end.
  std::string image = Image("{}", "");
  image[0] = 3;
  auto past = Parse(image);
  EXPECT_EQ(past.status().code(), Code::kCorruption);
  EXPECT_NE(past.status().message().find("header length 3"), std::string::npos) << past.status().ToString();
  // Metadata is skipped, whatever it holds.
  auto meta = Parse(Image(R"({"__metadata__": {"format": "pt"}})", ""));
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  // Offsets: two unsigned integers.
  const std::string eight(8, '\0');
  EXPECT_FALSE(Parse(Image(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", eight)).ok());
  EXPECT_FALSE(Parse(Image(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}})", eight)).ok());
  EXPECT_FALSE(Parse(Image(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", eight)).ok());
  EXPECT_FALSE(Parse(Image(R"({"w": {"dtype": "U8", "shape": 1, "data_offsets": [0, 1]}})", eight)).ok());
  EXPECT_FALSE(Parse(Image(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", eight)).ok());
  EXPECT_FALSE(Parse(Image(R"({"w": 1})", eight)).ok());
}

TEST(FormatMutantsTest, SafetensorsShapeLimits) {
  const std::string eight(8, '\0');
  // 2^40 per dimension is allowed (and then fails on the span); 2^40 + 1 is not.
  auto at_limit = Parse(Image(One("U8", "[1099511627776]", 0, 8), eight));
  ASSERT_FALSE(at_limit.ok());
  EXPECT_EQ(at_limit.status().message().find("too large"), std::string::npos) << at_limit.status().ToString();
  auto past_limit = Parse(Image(One("U8", "[1099511627777]", 0, 8), eight));
  ASSERT_FALSE(past_limit.ok());
  EXPECT_NE(past_limit.status().message().find("too large"), std::string::npos) << past_limit.status().ToString();
  // 2^50 elements in all is allowed; 2^50 + 2^10 is not.
  auto many = Parse(Image(One("U8", "[1099511627776, 1024]", 0, 8), eight));
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().message().find("too many"), std::string::npos) << many.status().ToString();
  auto too_many = Parse(Image(One("U8", "[1099511627776, 1025]", 0, 8), eight));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("too many elements"), std::string::npos)
      << too_many.status().ToString();
  // A zero dimension is fine (and makes the tensor empty).
  auto zero = Parse(Image(One("U8", "[0, 1099511627776]", 0, 0), eight));
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_EQ((*zero)[0].num_elements, 0);
}

TEST(FormatMutantsTest, SafetensorsTensorsMayTouchButNotOverlap) {
  const std::string data(12, 'z');
  auto touching = Parse(Image(R"({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                                  "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                  "c": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                              data));
  ASSERT_TRUE(touching.ok()) << touching.status().ToString();
  ASSERT_EQ(touching->size(), 3u);
  EXPECT_EQ((*touching)[0].name, "a");  // sorted by offset
  EXPECT_EQ((*touching)[1].name, "b");
  EXPECT_EQ((*touching)[2].name, "c");
  auto overlap = Parse(Image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                 "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                                 "c": {"dtype": "U8", "shape": [1], "data_offsets": [7, 8]}})",
                             data));
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("tensor 'c' overlaps tensor 'b'"), std::string::npos)
      << overlap.status().ToString();
}

TEST(FormatMutantsTest, SafetensorsFileOpenAndFind) {
  const std::string path = ::testing::TempDir() + "format_mutants_" + std::to_string(::getpid()) + ".safetensors";
  std::ofstream(path, std::ios::binary) << Image(One("U8", "[4]", 0, 4), "abcd");
  auto f = SafetensorsFile::Open(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const SafetensorsTensor* w = (*f)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(w->data), 4), "abcd");
  EXPECT_EQ((*f)->Find("x"), nullptr);
  EXPECT_EQ((*f)->tensors().size(), 1u);
}

// ----------------------------------------------------------------------- GGUF

class Gguf {
 public:
  template <typename T>
  void Put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void Str(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes_ += s;
  }
  void Header(uint64_t n_tensors, uint64_t n_kv) {
    bytes_ += "GGUF";
    Put<uint32_t>(3);
    Put<uint64_t>(n_tensors);
    Put<uint64_t>(n_kv);
  }
  void KvU32(const std::string& key, uint32_t v) {
    Str(key);
    Put<uint32_t>(4);
    Put<uint32_t>(v);
  }
  void KvStrings(const std::string& key, const std::vector<std::string>& v) {
    Str(key);
    Put<uint32_t>(9);
    Put<uint32_t>(8);
    Put<uint64_t>(v.size());
    for (const auto& s : v) Str(s);
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
  void Data(size_t n) { bytes_.append(n, 'd'); }
  Result<std::unique_ptr<GgufFile>> Open(const std::string& name) const {
    const std::string path = ::testing::TempDir() + "format_mutants_" + std::to_string(::getpid()) + "_" + name;
    std::ofstream(path, std::ios::binary) << bytes_;
    auto f = GgufFile::Open(path);
    ::unlink(path.c_str());
    return f;
  }
  std::string bytes_;
};

TEST(FormatMutantsTest, GgufAlignmentZeroIsCorrupt) {
  for (bool with_tensor : {false, true}) {
    Gguf g;
    g.Header(with_tensor ? 1 : 0, 1);
    g.KvU32("general.alignment", 0);
    if (with_tensor) {
      g.Tensor("t", {8}, 0, 0);
      g.Align(32);
      g.Data(32);
    }
    auto f = g.Open("a0.gguf");
    ASSERT_FALSE(f.ok()) << with_tensor;
    EXPECT_EQ(f.status().code(), Code::kCorruption);
    EXPECT_NE(f.status().message().find("general.alignment 0"), std::string::npos) << f.status().ToString();
  }
}

TEST(FormatMutantsTest, GgufAlignmentPowersOfTwo) {
  for (uint32_t alignment : {1u, 2u, 8u, 256u}) {
    Gguf g;
    g.Header(1, 1);
    g.KvU32("general.alignment", alignment);
    g.Tensor("t", {2}, 0, 0);
    g.Align(alignment);
    g.Data(8);
    auto f = g.Open("pow2.gguf");
    ASSERT_TRUE(f.ok()) << alignment << ": " << f.status().ToString();
    EXPECT_EQ((*f)->alignment(), alignment);
    EXPECT_EQ((*f)->data_offset() % alignment, 0u);
    EXPECT_EQ((*f)->data_offset() + 8, g.bytes_.size());
  }
  for (uint32_t alignment : {3u, 6u, 48u, 0x80000001u}) {
    Gguf g;
    g.Header(0, 1);
    g.KvU32("general.alignment", alignment);
    auto f = g.Open("npow2.gguf");
    EXPECT_EQ(f.status().code(), Code::kCorruption) << alignment;
  }
  {
    Gguf g;  // alignment of the wrong type
    g.Header(0, 1);
    g.Str("general.alignment");
    g.Put<uint32_t>(10);  // uint64
    g.Put<uint64_t>(32);
    auto f = g.Open("a64.gguf");
    EXPECT_EQ(f.status().code(), Code::kCorruption);
    EXPECT_NE(f.status().message().find("want uint32"), std::string::npos) << f.status().ToString();
  }
  {
    Gguf g;  // no alignment key: 32
    g.Header(1, 0);
    g.Tensor("t", {2}, 0, 0);
    g.Align(32);
    g.Data(8);
    auto f = g.Open("default.gguf");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ((*f)->alignment(), 32u);
    EXPECT_EQ((*f)->data_offset() % 32, 0u);
  }
}

TEST(FormatMutantsTest, GgufTensorDataBounds) {
  auto file = [](uint64_t offset, size_t data) {
    Gguf g;
    g.Header(2, 0);
    g.Tensor("a", {8}, 0, 0);       // F32: 32 bytes
    g.Tensor("b", {4}, 0, offset);  // F32: 16 bytes
    g.Align(32);
    g.Data(data);
    return g;
  };
  auto exact = file(32, 48).Open("exact.gguf");
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  const GgufTensor* b = (*exact)->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size_bytes, 16u);
  EXPECT_EQ(b->num_elements, 4);
  EXPECT_EQ(b->file_offset, (*exact)->data_offset() + 32);
  EXPECT_EQ((*exact)->FindTensor("c"), nullptr);
  ASSERT_EQ((*exact)->tensors().size(), 2u);
  EXPECT_EQ((*exact)->tensors()[0].name, "a");
  // One byte short: b's span ends one byte past the data section.
  auto short_by_one = file(32, 47).Open("short.gguf");
  ASSERT_FALSE(short_by_one.ok());
  EXPECT_NE(short_by_one.status().message().find("tensor 'b'"), std::string::npos)
      << short_by_one.status().ToString();
  // An offset far past the end.
  EXPECT_FALSE(file(uint64_t{1} << 40, 48).Open("far.gguf").ok());
  // A tensor list with no data section at all.
  Gguf none;
  none.Header(1, 0);
  none.Tensor("t", {8}, 0, 0);
  auto missing = none.Open("nodata.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kCorruption);
  // No tensors: the file may end right after the metadata.
  Gguf empty;
  empty.Header(0, 1);
  empty.KvU32("general.alignment", 64);
  auto ok = empty.Open("empty.gguf");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE((*ok)->tensors().empty());
  EXPECT_EQ((*ok)->version(), 3u);
}

TEST(FormatMutantsTest, GgufTensorShapes) {
  auto open_one = [](std::vector<uint64_t> dims, uint32_t type, size_t data) {
    Gguf g;
    g.Header(1, 0);
    g.Tensor("t", std::move(dims), type, 0);
    g.Align(32);
    g.Data(data);
    return g.Open("shape.gguf");
  };
  // Four dimensions are allowed, five are not.
  auto four = open_one({2, 1, 1, 2}, 0, 16);
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  EXPECT_EQ((*four)->tensors()[0].dims, (std::vector<int64_t>{2, 1, 1, 2}));
  EXPECT_EQ((*four)->tensors()[0].num_elements, 4);
  EXPECT_FALSE(open_one({2, 1, 1, 1, 2}, 0, 16).ok());
  // A scalar (no dimensions) is one element.
  auto scalar = open_one({}, 0, 4);
  ASSERT_TRUE(scalar.ok()) << scalar.status().ToString();
  EXPECT_EQ((*scalar)->tensors()[0].num_elements, 1);
  EXPECT_EQ((*scalar)->tensors()[0].size_bytes, 4u);
  // Q8_0: blocks of 32 elements in 34 bytes; dimension 0 must be a multiple of 32.
  auto q8 = open_one({64, 3}, 8, 6 * 34);
  ASSERT_TRUE(q8.ok()) << q8.status().ToString();
  EXPECT_EQ((*q8)->tensors()[0].size_bytes, 6u * 34);
  EXPECT_EQ((*q8)->tensors()[0].type, GgmlType::kQ8_0);
  EXPECT_FALSE(open_one({48, 1}, 8, 64).ok());
  // A dimension past int64.
  EXPECT_FALSE(open_one({uint64_t{1} << 63}, 0, 32).ok());
  // Duplicate names.
  Gguf dup;
  dup.Header(2, 0);
  dup.Tensor("t", {8}, 0, 0);
  dup.Tensor("t", {8}, 0, 32);
  dup.Align(32);
  dup.Data(64);
  auto twice = dup.Open("dup.gguf");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("duplicate tensor name"), std::string::npos) << twice.status().ToString();
}

TEST(FormatMutantsTest, GgmlTypeTable) {
  // ggml's type_traits: id, name, elements per block, bytes per block.
  struct Row {
    uint32_t id;
    const char* name;
    int64_t block;
    int64_t bytes;
  };
  const Row rows[] = {
      {0, "F32", 1, 4},          {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
      {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
      {10, "Q2_K", 256, 84},     {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
      {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
      {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
      {22, "IQ2_S", 256, 82},    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
      {26, "I32", 1, 4},         {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
      {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
  };
  for (const Row& row : rows) {
    const GgmlTypeTraits* traits = FindGgmlTypeTraits(row.id);
    ASSERT_NE(traits, nullptr) << row.id;
    EXPECT_STREQ(traits->name, row.name) << row.id;
    EXPECT_EQ(traits->block_size, row.block) << row.name;
    EXPECT_EQ(traits->type_size, row.bytes) << row.name;
  }
  for (uint32_t gone : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) {
    EXPECT_EQ(FindGgmlTypeTraits(gone), nullptr) << gone;
  }
}

// Empty strings take 8 bytes each: three of them fit exactly in the last 24.
TEST(FormatMutantsTest, GgufStringArrayEndingTheFile) {
  Gguf g;
  g.Header(0, 1);
  g.KvStrings("names", {"", "", ""});
  auto f = g.Open("strings.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto names = (*f)->GetStringArray("names");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->size(), 3u);
  g.bytes_.resize(g.bytes_.size() - 1);
  auto cut = g.Open("cut.gguf");
  EXPECT_EQ(cut.status().code(), Code::kCorruption);
}

TEST(FormatMutantsTest, GgufLyingCountsNameTheirOffsets) {
  Gguf kv;
  kv.Header(0, uint64_t{1} << 40);
  auto f = kv.Open("kv.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("byte offset 16"), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find("metadata count 1099511627776 cannot fit"), std::string::npos)
      << f.status().ToString();
  Gguf tensors;
  tensors.Header(uint64_t{1} << 40, 0);
  auto t = tensors.Open("tensors.gguf");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("byte offset 8"), std::string::npos) << t.status().ToString();
}

TEST(FormatMutantsTest, GgufUnsupportedArrayElementTypeNamesItsOffset) {
  Gguf g;
  g.Header(0, 1);
  g.Str("arr");         // key at 24..34
  g.Put<uint32_t>(9);   // array, at 35
  g.Put<uint32_t>(99);  // element type, at 39
  g.Put<uint64_t>(1);
  auto f = g.Open("arr99.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("byte offset 39"), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find("unsupported array element type 99"), std::string::npos)
      << f.status().ToString();
}

// ---------------------------------------------------------------- config.json

Result<ModelConfig> Config(const std::string& extra) {
  auto json = ParseJson(R"({"model_type": "llama", "vocab_size": 300, "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96)" + extra + "}");
  if (!json.ok()) return json.status();
  return ParseHfConfig(*json, "config.json");
}

TEST(FormatMutantsTest, HfConfigFieldsAndDefaults) {
  auto c = Config("");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to the attention heads
  EXPECT_EQ(c->head_dim, 16);     // hidden_size / heads
  EXPECT_EQ(c->intermediate_size, 96);
  EXPECT_EQ(c->max_position_embeddings, 0);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias.has_value());
  EXPECT_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->decoder_sparse_step, 1);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->num_experts, 0);
  EXPECT_EQ(c->num_experts_per_tok, 0);
  EXPECT_EQ(c->moe_intermediate_size, 0);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->mlp_only_layers.empty());
  EXPECT_TRUE(c->dtype.empty());
  EXPECT_EQ(c->rope.scaling, RopeScalingType::kNone);
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_TRUE(ValidateModelConfig(*c, "config.json").ok());
  auto full = Config(R"(, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 4096,
      "rms_norm_eps": 1e-5, "tie_word_embeddings": true, "attention_bias": true, "rope_theta": 500000,
      "bos_token_id": 1, "eos_token_id": [2, 3], "torch_dtype": "bfloat16")");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->num_kv_heads, 2);
  EXPECT_EQ(full->head_dim, 32);
  EXPECT_EQ(full->max_position_embeddings, 4096);
  EXPECT_EQ(full->rms_norm_eps, 1e-5);
  EXPECT_TRUE(full->tie_word_embeddings);
  EXPECT_EQ(full->attention_bias, true);
  EXPECT_EQ(full->rope.theta, 500000.0);
  EXPECT_EQ(full->bos_token_id, 1);
  EXPECT_EQ(full->eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(full->dtype, "bfloat16");
  auto one_eos = Config(R"(, "eos_token_id": 7, "qkv_bias": false)");
  ASSERT_TRUE(one_eos.ok());
  EXPECT_EQ(one_eos->eos_token_ids, (std::vector<int64_t>{7}));
  EXPECT_EQ(one_eos->attention_bias, false);
}

TEST(FormatMutantsTest, HfConfigRopeScalingBounds) {
  auto linear = Config(R"(, "rope_scaling": {"type": "linear", "factor": 1.0})");
  ASSERT_TRUE(linear.ok()) << linear.status().ToString();
  EXPECT_EQ(linear->rope.scaling, RopeScalingType::kLinear);
  EXPECT_EQ(linear->rope.factor, 1.0);
  auto half = Config(R"(, "rope_scaling": {"type": "linear", "factor": 0.5})");
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_EQ(half->rope.factor, 0.5);
  auto zero = Config(R"(, "rope_scaling": {"type": "linear", "factor": 0})");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("factor: must be positive"), std::string::npos) << zero.status().ToString();
  const std::string llama3 = R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": LOW,
      "high_freq_factor": HIGH, "original_max_position_embeddings": ORIG})";
  auto with = [&](const char* low, const char* high, const char* orig) {
    std::string text = llama3;
    text.replace(text.find("LOW"), 3, low);
    text.replace(text.find("HIGH"), 4, high);
    text.replace(text.find("ORIG"), 4, orig);
    return Config(text);
  };
  auto ok = with("1.0", "4.0", "8192");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->rope.scaling, RopeScalingType::kLlama3);
  EXPECT_EQ(ok->rope.low_freq_factor, 1.0);
  EXPECT_EQ(ok->rope.high_freq_factor, 4.0);
  EXPECT_EQ(ok->rope.original_max_position_embeddings, 8192);
  EXPECT_TRUE(with("0.001", "0.002", "1").ok());
  EXPECT_FALSE(with("0", "4.0", "8192").ok());
  EXPECT_FALSE(with("4.0", "4.0", "8192").ok());
  EXPECT_FALSE(with("1.0", "4.0", "0").ok());
  EXPECT_FALSE(Config(R"(, "rope_scaling": {"type": "yarn", "factor": 2})").ok());
  EXPECT_FALSE(Config(R"(, "rope_theta": 0)").ok());
  auto dflt = Config(R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 20.0})");
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->rope.theta, 20.0);
  EXPECT_EQ(dflt->rope.scaling, RopeScalingType::kNone);
}

TEST(FormatMutantsTest, HfConfigValidationBounds) {
  auto validate = [](const std::string& extra) {
    auto c = Config(extra);
    if (!c.ok()) return c.status();
    return ValidateModelConfig(*c, "config.json");
  };
  EXPECT_TRUE(validate(R"(, "num_key_value_heads": 1)").ok());
  EXPECT_FALSE(validate(R"(, "num_key_value_heads": 3)").ok());
  EXPECT_FALSE(validate(R"(, "num_key_value_heads": 0)").ok());
  EXPECT_FALSE(validate(R"(, "head_dim": 15)").ok());
  EXPECT_FALSE(validate(R"(, "hidden_size": 66)").ok());  // not divisible by 4 heads
  EXPECT_FALSE(validate(R"(, "rms_norm_eps": 0)").ok());
  EXPECT_TRUE(validate(R"(, "eos_token_id": 299)").ok());
  EXPECT_FALSE(validate(R"(, "eos_token_id": 300)").ok());
  EXPECT_FALSE(validate(R"(, "eos_token_id": -1)").ok());
  EXPECT_FALSE(validate(R"(, "hidden_act": "gelu")").ok());
  EXPECT_FALSE(validate(R"(, "mlp_bias": true)").ok());
  EXPECT_FALSE(validate(R"(, "use_sliding_window": true)").ok());
  EXPECT_TRUE(validate(R"(, "num_hidden_layers": 65536)").ok());
  EXPECT_FALSE(validate(R"(, "num_hidden_layers": 65537)").ok());
  const std::string moe = R"(, "num_experts": 4, "moe_intermediate_size": 32, "intermediate_size": 0)";
  EXPECT_TRUE(validate(moe + R"(, "num_experts_per_tok": 4)").ok());
  EXPECT_TRUE(validate(moe + R"(, "num_experts_per_tok": 1)").ok());
  EXPECT_FALSE(validate(moe + R"(, "num_experts_per_tok": 5)").ok());
  EXPECT_FALSE(validate(moe + R"(, "num_experts_per_tok": 0)").ok());
  EXPECT_FALSE(validate(moe + R"(, "num_experts_per_tok": 2, "decoder_sparse_step": 2)").ok());  // dense layers
  EXPECT_FALSE(validate(moe + R"(, "num_experts_per_tok": 2, "shared_expert_intermediate_size": -1)").ok());
  EXPECT_FALSE(validate(R"(, "num_experts": -1)").ok());
  auto c = Config(moe + R"(, "num_experts_per_tok": 2, "mlp_only_layers": [1], "norm_topk_prob": true,
                        "shared_expert_intermediate_size": 8)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->IsMoeLayer(0));
  EXPECT_FALSE(c->IsMoeLayer(1));
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->shared_expert_intermediate_size, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 32);
}

}  // namespace
}  // namespace flashroll::engine
