#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace flashroll::engine {

namespace {

using unicode_internal::CategoryRange;
using unicode_internal::CodepointRange;

// Direct lookup for the Basic Multilingual Plane, where nearly all text
// lives; higher planes fall back to a binary search of the ranges.
constexpr uint32_t kBmpSize = 0x10000;

const std::array<CharClass, kBmpSize>& BmpTable() {
  static const auto* table = [] {
    auto* t = new std::array<CharClass, kBmpSize>();
    t->fill(CharClass::kOther);
    for (size_t i = 0; i < unicode_internal::kCategoryRangeCount; ++i) {
      const CategoryRange& r = unicode_internal::kCategoryRanges[i];
      for (uint32_t cp = r.first; cp <= r.last && cp < kBmpSize; ++cp) (*t)[cp] = r.cls;
    }
    return t;
  }();
  return *table;
}

template <typename Range>
const Range* FindRange(const Range* ranges, size_t count, uint32_t cp) {
  const Range* end = ranges + count;
  const Range* it =
      std::upper_bound(ranges, end, cp, [](uint32_t c, const Range& r) { return c < r.first; });
  if (it == ranges) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

}  // namespace

CharClass ClassOf(uint32_t cp) {
  if (cp < kBmpSize) return BmpTable()[cp];
  const CategoryRange* r = FindRange(unicode_internal::kCategoryRanges,
                                     unicode_internal::kCategoryRangeCount, cp);
  return r ? r->cls : CharClass::kOther;
}

bool IsWhitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool IsDeepseekLlmLetter(uint32_t cp) {
  return FindRange(unicode_internal::kDeepseekLlmLetterRanges,
                   unicode_internal::kDeepseekLlmLetterRangeCount, cp) != nullptr;
}

uint32_t DecodeUtf8(std::string_view s, size_t pos, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  size_t left = s.size() - pos;
  unsigned char c = p[0];
  *len = 1;
  if (c < 0x80) return c;
  size_t n;
  uint32_t cp;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return kInvalidCodepoint;
  }
  if (left < n) return kInvalidCodepoint;
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return kInvalidCodepoint;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalidCodepoint;
  *len = n;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t IncompleteUtf8Suffix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a sequence cut short.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto lead = static_cast<unsigned char>(s[n - back]);
    if ((lead & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t need = lead >= 0xC2 && lead <= 0xDF ? 2 : (lead & 0xF0) == 0xE0 ? 3
                : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    if (need <= back) return 0;  // complete (or invalid) sequence
    if (back >= 2) {
      // The second byte's range depends on the lead (no overlongs,
      // surrogates or code points above U+10FFFF).
      auto second = static_cast<unsigned char>(s[n - back + 1]);
      unsigned char lo = 0x80, hi = 0xBF;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
      if (second < lo || second > hi) return 0;
    }
    return back;
  }
  return 0;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len;
    uint32_t cp = DecodeUtf8(s, pos, &len);
    if (cp == kInvalidCodepoint) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

}  // namespace flashroll::engine
