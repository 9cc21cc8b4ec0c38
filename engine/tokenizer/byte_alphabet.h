// The GPT-2 byte alphabet: byte-level BPE vocabularies spell every byte as a
// printable code point, so that token texts are valid Unicode. Printable
// Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the
// other 68 bytes map, in order, to U+0100..U+0143 (space is 'Ġ', U+0120,
// newline 'Ċ', U+010A).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace flashroll::engine {

inline constexpr bool IsPrintableByte(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// The alphabet code point of byte `b`.
inline constexpr uint32_t ByteToAlphabet(uint8_t b) {
  if (IsPrintableByte(b)) return b;
  uint32_t shifted = 0;  // number of non-printable bytes below b
  for (uint32_t x = 0; x < b; ++x) shifted += IsPrintableByte(x) ? 0 : 1;
  return 0x100 + shifted;
}

// True if `cp` is one of the 256 alphabet code points.
inline constexpr bool IsAlphabetChar(uint32_t cp) {
  return IsPrintableByte(cp) || (cp >= 0x100 && cp < 0x100 + 68);
}

}  // namespace flashroll::engine
