#include "common/base64.h"

#include <array>

namespace flashroll {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int8_t kNotBase64 = -1;

constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> table{};
  table.fill(kNotBase64);
  for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();

// A character for an error message: printable ASCII as itself, else \xNN.
std::string Shown(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  constexpr char kHex[] = "0123456789abcdef";
  return std::string("\\x") + kHex[u >> 4] + kHex[u & 0xf];
}

}  // namespace

std::string Base64Encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (rest == 2 ? uint32_t{bytes[i + 1]} << 8 : 0);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::vector<uint8_t>> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return Status::InvalidArgument("length " + std::to_string(text.size()) + " is not a multiple of 4");
  }
  // '=' may end the last group only: "xx==" or "xxx=".
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  const size_t data_chars = text.size() - pad;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int nbits = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int8_t v = kDecode[static_cast<unsigned char>(text[i])];
    if (v == kNotBase64) {
      const std::string where = " at offset " + std::to_string(i);
      if (text[i] == '=') return Status::InvalidArgument("padding '='" + where + " before the end");
      return Status::InvalidArgument("invalid character '" + Shown(text[i]) + "'" + where);
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(static_cast<uint8_t>(bits >> nbits));
      bits &= (1u << nbits) - 1;
    }
  }
  // The last character's bits past the last byte: zero in the one encoding
  // of these bytes.
  if (bits != 0) {
    return Status::InvalidArgument("nonzero bits after the last byte at offset " + std::to_string(data_chars - 1));
  }
  return out;
}

}  // namespace flashroll
