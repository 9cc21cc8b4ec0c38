// Test helpers for checkpoint loading: a temporary checkpoint root, a copy
// of a shipped model inside it, and a safetensors file whose header is
// rewritten (a tensor's shape or dtype changed, the data kept).
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"

namespace flashroll::engine::testing {

// A fresh directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "flashroll_ckpt_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // The names in the directory, "." and ".." left out.
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename());
    return names;
  }

 private:
  std::string path_;
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Copies a shipped model's config and weights (not its tokenizer) to `dst`.
inline void CopyCheckpoint(const std::string& src, const std::string& dst) {
  std::filesystem::create_directories(dst);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    std::filesystem::copy_file(src + "/" + name, dst + "/" + name,
                               std::filesystem::copy_options::overwrite_existing);
  }
}

// Rewrites the JSON header of the safetensors file at `path` with `edit`,
// keeping the tensor data as it is.
inline void EditSafetensorsHeader(const std::string& path, const std::function<void(Json&)>& edit) {
  const std::string bytes = ReadWholeFile(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  Result<Json> header = ParseJson(std::string_view(bytes).substr(8, len));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  edit(*header);
  std::string text = header->dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  out.append(bytes, 8 + len, std::string::npos);
  WriteWholeFile(path, out);
}

}  // namespace flashroll::engine::testing
