// The sequence file format: a round trip keeps every field and byte, and
// each way a file can be damaged is refused with a message naming the file
// and the fault.
#include "engine/serving/sequence_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>

#include "common/crc32c.h"

namespace flashroll::engine {
namespace {

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

class SequenceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "seqfile_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    path_ = SequenceFilePath(dir_, 7);
    snap_.sequence_id = 7;
    snap_.choice = 2;
    snap_.scoring = false;
    snap_.weight_version = 3;
    snap_.layout = {.num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .block_size = 4, .dtype = KvDType::kBF16};
    snap_.prompt_len = 5;
    snap_.computed = 9;
    snap_.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    snap_.hashes = {11, 12};
    snap_.block_versions = {3, 3, 3};  // 9 computed tokens in blocks of 4
    for (uint8_t i = 0; i < 27; ++i) snap_.routing.push_back(static_cast<uint8_t>(i * 5 % 8));  // 9 tokens x 3 ids
    kv_.resize(static_cast<size_t>(snap_.computed * snap_.layout.TokenBytes()));
    for (size_t i = 0; i < kv_.size(); ++i) kv_[i] = static_cast<uint8_t>(i * 37 + 1);
    snap_.kv = kv_;
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  // Rewrites the file's payload with `edit` and gives it a matching size and checksum.
  void EditPayload(const std::function<void(std::string*)>& edit) {
    std::string bytes = ReadBytes(path_);
    std::string payload = bytes.substr(kSequenceFileHeaderBytes);
    edit(&payload);
    const uint32_t crc = Crc32c(payload.data(), payload.size());
    const uint64_t size = payload.size();
    bytes.resize(kSequenceFileHeaderBytes);
    std::memcpy(bytes.data() + 12, &crc, 4);
    std::memcpy(bytes.data() + 16, &size, 8);
    WriteBytes(path_, bytes + payload);
  }
  // The Corruption message of reading the file, which must name it.
  std::string Refusal() {
    auto r = ReadSequenceFile(path_);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
    EXPECT_EQ(r.status().message().rfind("sequence file " + path_ + ": ", 0), 0u) << r.status().message();
    return r.status().message();
  }

  std::string dir_, path_;
  SequenceSnapshot snap_;
  std::vector<uint8_t> kv_;
};

TEST_F(SequenceFileTest, RoundTripKeepsEveryFieldAndByte) {
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EXPECT_NE(::access((path_ + ".tmp").c_str(), F_OK), 0);
  auto r = ReadSequenceFile(path_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sequence_id, 7u);
  EXPECT_EQ(r->choice, 2);
  EXPECT_FALSE(r->scoring);
  EXPECT_EQ(r->weight_version, 3);
  EXPECT_EQ(r->layout, snap_.layout);
  EXPECT_EQ(r->prompt_len, 5);
  EXPECT_EQ(r->computed, 9);
  EXPECT_EQ(r->tokens, snap_.tokens);
  EXPECT_EQ(r->hashes, snap_.hashes);
  EXPECT_EQ(r->routing, snap_.routing);
  EXPECT_EQ(r->block_versions, snap_.block_versions);
  EXPECT_EQ(std::vector<uint8_t>(r->kv.begin(), r->kv.end()), kv_);
  // The header, the fixed fields, the four arrays and the KV: nothing else.
  EXPECT_EQ(ReadBytes(path_).size(), 24u + 24 + 36 + 16 + 8 + 40 + 8 + 16 + 8 + 27 + 8 + 24 + kv_.size());

  snap_.scoring = true;
  snap_.layout.dtype = KvDType::kF32;
  kv_.resize(kv_.size() * 2);
  snap_.kv = kv_;
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());  // over the old one
  r = ReadSequenceFile(path_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->scoring);
  EXPECT_EQ(r->layout.dtype, KvDType::kF32);
}

TEST_F(SequenceFileTest, RefusesATruncatedFile) {
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  const std::string bytes = ReadBytes(path_);
  WriteBytes(path_, bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(Refusal().find("truncated or padded: the header says"), std::string::npos);
  WriteBytes(path_, bytes + "x");
  EXPECT_NE(Refusal().find("truncated or padded"), std::string::npos);
  WriteBytes(path_, bytes.substr(0, 10));
  EXPECT_NE(Refusal().find("truncated: 10 bytes, shorter than the 24-byte header"), std::string::npos);
}

TEST_F(SequenceFileTest, RefusesAnotherMagicOrFormatVersion) {
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  std::string bytes = ReadBytes(path_);
  bytes[0] = 'X';
  WriteBytes(path_, bytes);
  EXPECT_NE(Refusal().find("not a sequence file (bad magic)"), std::string::npos);
  bytes[0] = 'F';
  const uint32_t version = kSequenceFileVersion + 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  WriteBytes(path_, bytes);
  EXPECT_NE(Refusal().find("format version 3, this build reads version 2 only"), std::string::npos);
}

TEST_F(SequenceFileTest, RefusesVersionOneFilesWhichHaveNoRouting) {
  // A version 1 file (no routing section) as the previous build wrote it.
  ASSERT_EQ(kSequenceFileVersion, 2u);
  snap_.routing.clear();
  snap_.block_versions.clear();
  snap_.computed = 0;
  snap_.hashes.clear();
  snap_.kv = {};
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  std::string bytes = ReadBytes(path_);
  const size_t routing_at = 24 + 24 + 36 + 16 + 8 + 40 + 8;
  bytes.erase(routing_at, 16);  // the (empty) routing and block version arrays' counts
  const uint32_t v1 = 1;
  std::memcpy(bytes.data() + 8, &v1, 4);
  const uint32_t crc = Crc32c(bytes.data() + 24, bytes.size() - 24);
  const uint64_t size = bytes.size() - 24;
  std::memcpy(bytes.data() + 12, &crc, 4);
  std::memcpy(bytes.data() + 16, &size, 8);
  WriteBytes(path_, bytes);
  EXPECT_NE(Refusal().find("format version 1, this build reads version 2 only"), std::string::npos);
}

TEST_F(SequenceFileTest, RefusesAFlippedBit) {
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  std::string bytes = ReadBytes(path_);
  bytes[bytes.size() - 5] ^= 0x10;  // in the KV
  WriteBytes(path_, bytes);
  EXPECT_NE(Refusal().find("checksum mismatch"), std::string::npos);
}

TEST_F(SequenceFileTest, RefusesPayloadsWhoseFieldsDoNotFit) {
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EditPayload([](std::string* p) { p->resize(30); });
  EXPECT_NE(Refusal().find("the payload ends inside its fields"), std::string::npos);

  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EditPayload([](std::string* p) { (*p)[24] = 9; });  // the dtype code
  EXPECT_NE(Refusal().find("unknown KV dtype code 9"), std::string::npos);

  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EditPayload([](std::string* p) { (*p)[28] = 0; });  // num_layers 0
  EXPECT_NE(Refusal().find("fields do not fit together"), std::string::npos);

  snap_.computed = 11;  // more than its 10 tokens
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EXPECT_NE(Refusal().find("fields do not fit together: 10 tokens, prompt_len 5, computed 11"), std::string::npos);
  snap_.computed = 9;
  snap_.prompt_len = 12;
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EXPECT_NE(Refusal().find("fields do not fit together"), std::string::npos);
  snap_.prompt_len = 5;
  snap_.hashes = {1, 2, 3};  // 9 computed tokens fill 2 blocks of 4
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EXPECT_NE(Refusal().find("3 block hashes"), std::string::npos);
  snap_.hashes = {1, 2};
  snap_.block_versions = {3, 3};  // 9 computed tokens take 3 blocks
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EXPECT_NE(Refusal().find("2 block versions"), std::string::npos);
  snap_.block_versions = {3, 3, 3};

  snap_.kv = std::span<const uint8_t>(kv_).first(kv_.size() - 1);
  ASSERT_TRUE(WriteSequenceFile(path_, snap_).ok());
  EXPECT_NE(Refusal().find("the KV section holds 575 bytes, not 9 computed tokens x 64 bytes"), std::string::npos);
}

TEST_F(SequenceFileTest, ErrorsOfTheFileSystemNameTheFile) {
  auto r = ReadSequenceFile(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("open " + path_), std::string::npos);
  const std::string missing = dir_ + "/no/such/dir/sequence-1.kv";
  Status st = WriteSequenceFile(missing, snap_);
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("open " + missing + ".tmp"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace flashroll::engine
