#include "engine/format/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include <gtest/gtest.h>


namespace flashroll::engine {
namespace {

// A safetensors image: 8-byte length, the header, then `data`.
std::string Image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

Result<std::vector<SafetensorsTensor>> ParseImage(const std::string& image) {
  return ParseSafetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "x.safetensors");
}

TEST(SafetensorsTest, ParsesTensorsInPlace) {
  float values[6] = {1, 2, 3, 4, 5, 6};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  data += std::string("\x01\x02\x03\x04", 4);
  const std::string image = Image(
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
          "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})",
      data);
  Result<std::vector<SafetensorsTensor>> tensors = ParseImage(image);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 2u);
  const SafetensorsTensor& a = (*tensors)[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, kernels::DType::kF32);
  EXPECT_EQ(a.num_elements, 6);
  EXPECT_EQ(a.size_bytes, 24u);
  float back[6];
  std::memcpy(back, a.data, sizeof(back));
  EXPECT_EQ(back[5], 6.0f);
  EXPECT_EQ(a.data, reinterpret_cast<const uint8_t*>(image.data()) + image.size() - 28);
  EXPECT_EQ((*tensors)[1].dtype, kernels::DType::kBF16);
}

TEST(SafetensorsTest, UnsupportedDtypesParseWithoutComputeType) {
  Result<std::vector<SafetensorsTensor>> t =
      ParseImage(Image(R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", std::string(8, '\0')));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE((*t)[0].dtype.has_value());
  EXPECT_EQ((*t)[0].dtype_name, "I64");
}

struct BadCase {
  const char* what;
  std::string image;
  const char* expect;  // substring of the message
};

TEST(SafetensorsTest, RejectsMalformedFilesWithTheTensorName) {
  const std::string eight(8, '\0');
  const BadCase cases[] = {
      {"short", std::string(5, '\0'), "too short"},
      {"header past end", Image("{}", "").substr(0, 8) + "{", "runs past the end"},
      {"not json", Image("{nope", eight), "x.safetensors: header"},
      {"not object", Image("[1]", eight), "not a JSON object"},
      {"past data", Image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", eight),
       "tensor 'w': data_offsets [0, 16] lie outside"},
      {"size mismatch", Image(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight),
       "tensor 'w': data_offsets span 8 bytes"},
      {"unknown dtype", Image(R"({"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}})", eight),
       "tensor 'w': unknown dtype 'Q9'"},
      {"bad shape", Image(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", eight),
       "tensor 'w'"},
      {"missing offsets", Image(R"({"w": {"dtype": "F32", "shape": [1]}})", eight),
       "tensor 'w': data_offsets: missing"},
      {"overlap",
       Image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             eight),
       "overlaps"},
      {"huge shape",
       Image(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", eight),
       "tensor 'w'"},
  };
  for (const BadCase& c : cases) {
    Result<std::vector<SafetensorsTensor>> t = ParseImage(c.image);
    ASSERT_FALSE(t.ok()) << c.what;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << t.status().message();
    EXPECT_EQ(t.status().message().rfind("x.safetensors", 0), 0u) << c.what << ": " << t.status().message();
  }
}

TEST(SafetensorsTest, OpensAShardOfTheFixture) {
  Result<std::unique_ptr<SafetensorsFile>> f =
      SafetensorsFile::Open("tests/data/parity/llama/model-00001-of-00004.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const SafetensorsTensor* embed = (*f)->Find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{300, 64}));
  EXPECT_EQ((*f)->Find("lm_head.weight"), nullptr);
}

TEST(SafetensorsTest, TruncatedFileNamesThePath) {
  std::ifstream in("tests/data/parity/qwen3/model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  char dir[] = "/tmp/safetensors_test_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/model.safetensors";
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kCorruption);
  EXPECT_NE(f.status().message().find(path + ": tensor '"), std::string::npos) << f.status().message();
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace flashroll::engine
