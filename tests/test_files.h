// File and JSON readers every test binary shares: whole files in and out,
// the parity fixtures' float32 logits, and JSON arrays of token ids.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashroll::testing {

// The whole file; empty when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A fixture's logits.bin: little-endian float32.
inline std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

inline std::vector<int32_t> Ints(const nlohmann::json& array) {
  std::vector<int32_t> out;
  for (const nlohmann::json& v : array) out.push_back(v.get<int32_t>());
  return out;
}

// Exactly one line: the form of every command's error.
inline bool OneLine(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

}  // namespace flashroll::testing
