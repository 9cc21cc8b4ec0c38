#include "engine/tokenizer/pre_tokenizer.h"

#include <string>

#include "engine/tokenizer/unicode.h"

namespace flashroll::engine {

namespace {

// The text as code points plus the byte offset where each one starts
// (offsets has one extra entry: the text size).
struct Codepoints {
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;
};

void Decode(std::string_view text, Codepoints* out) {
  out->cps.clear();
  out->offsets.clear();
  out->cps.reserve(text.size());
  out->offsets.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len;
    out->cps.push_back(DecodeUtf8(text, pos, &len));
    out->offsets.push_back(pos);
    pos += len;
  }
  out->offsets.push_back(text.size());
}

bool IsWs(uint32_t c) { return c != kInvalidCodepoint && IsWhitespace(c); }
bool IsL(uint32_t c) { return c != kInvalidCodepoint && ClassOf(c) == CharClass::kLetter; }
bool IsN(uint32_t c) { return c != kInvalidCodepoint && ClassOf(c) == CharClass::kNumber; }
bool IsP(uint32_t c) { return c != kInvalidCodepoint && ClassOf(c) == CharClass::kPunctuation; }
bool IsNewline(uint32_t c) { return c == '\r' || c == '\n'; }
// [^\s\p{L}\p{N}]
bool IsOther(uint32_t c) { return !IsWs(c) && !IsL(c) && !IsN(c); }

uint32_t AsciiLower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length (in code points) of a contraction 's 't 're 've 'm 'll 'd at i, or 0.
size_t MatchContraction(const std::vector<uint32_t>& cp, size_t i, size_t hi, bool ignore_case) {
  if (cp[i] != '\'' || i + 1 >= hi) return 0;
  auto lower = [&](size_t k) { return ignore_case ? AsciiLower(cp[k]) : cp[k]; };
  uint32_t a = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < hi) {
    uint32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

template <typename Pred>
size_t RunEnd(const std::vector<uint32_t>& cp, size_t i, size_t hi, Pred pred) {
  while (i < hi && pred(cp[i])) ++i;
  return i;
}

// `\s+(?!\S)|\s+` at i (cp[i] is whitespace): the run minus its last code
// point when a non-space follows and the run is longer than one.
size_t MatchTrailingSpaces(const std::vector<uint32_t>& cp, size_t i, size_t hi) {
  size_t k = RunEnd(cp, i, hi, IsWs);
  if (k < hi && k - 1 > i) return k - 1 - i;
  return k - i;
}

// Length of the GPT-2 pattern's match at i.
size_t MatchGpt2(const std::vector<uint32_t>& cp, size_t i, size_t hi) {
  if (size_t n = MatchContraction(cp, i, hi, /*ignore_case=*/false)) return n;
  size_t s = i + (cp[i] == ' ' ? 1 : 0);
  if (s < hi) {
    if (IsL(cp[s])) return RunEnd(cp, s, hi, IsL) - i;
    if (IsN(cp[s])) return RunEnd(cp, s, hi, IsN) - i;
    if (IsOther(cp[s])) return RunEnd(cp, s, hi, IsOther) - i;
  }
  return MatchTrailingSpaces(cp, i, hi);
}

// Length of the Llama 3 (max_digits 3) or Qwen2 (max_digits 1) match at i.
size_t MatchLlama3(const std::vector<uint32_t>& cp, size_t i, size_t hi, size_t max_digits) {
  if (size_t n = MatchContraction(cp, i, hi, /*ignore_case=*/true)) return n;
  uint32_t c = cp[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (IsL(c)) return RunEnd(cp, i, hi, IsL) - i;
  if (!IsNewline(c) && !IsN(c) && i + 1 < hi && IsL(cp[i + 1])) {
    return RunEnd(cp, i + 1, hi, IsL) - i;
  }
  // \p{N}{1,max}
  if (IsN(c)) {
    size_t k = i;
    while (k < hi && k - i < max_digits && IsN(cp[k])) ++k;
    return k - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t s = i + (c == ' ' ? 1 : 0);
  if (s < hi && IsOther(cp[s])) {
    size_t k = RunEnd(cp, s, hi, IsOther);
    return RunEnd(cp, k, hi, IsNewline) - i;
  }
  // \s*[\r\n]+ : up to and including the run's last newline.
  size_t k = RunEnd(cp, i, hi, IsWs);
  for (size_t q = k; q > i; --q) {
    if (IsNewline(cp[q - 1])) return q - i;
  }
  return MatchTrailingSpaces(cp, i, hi);
}

// One isolating split of a DeepSeek sequence: finds the leftmost match in
// [p, hi) and returns its [start, end), or start == hi when there is none.
struct Span {
  size_t start;
  size_t end;
};
using Finder = Span (*)(const std::vector<uint32_t>& cp, size_t p, size_t hi);

Span FindNewline(const std::vector<uint32_t>& cp, size_t p, size_t hi) {
  for (size_t q = p; q < hi; ++q) {
    if (IsNewline(cp[q])) return {q, q + 1};
  }
  return {hi, hi};
}

// \s?X+
template <bool (*X)(uint32_t)>
Span FindSpaceThenRun(const std::vector<uint32_t>& cp, size_t p, size_t hi) {
  for (size_t q = p; q < hi; ++q) {
    if (IsWs(cp[q]) && q + 1 < hi && X(cp[q + 1])) return {q, RunEnd(cp, q + 1, hi, X)};
    if (X(cp[q])) return {q, RunEnd(cp, q, hi, X)};
  }
  return {hi, hi};
}

// X+ (or a single X when `single`).
template <bool (*X)(uint32_t), bool single>
Span FindRun(const std::vector<uint32_t>& cp, size_t p, size_t hi) {
  for (size_t q = p; q < hi; ++q) {
    if (X(cp[q])) return {q, single ? q + 1 : RunEnd(cp, q, hi, X)};
  }
  return {hi, hi};
}

// \s+$ : the whitespace run that reaches the end of the piece.
Span FindTrailingSpace(const std::vector<uint32_t>& cp, size_t p, size_t hi) {
  size_t q = hi;
  while (q > p && IsWs(cp[q - 1])) --q;
  return q < hi ? Span{q, hi} : Span{hi, hi};
}

bool IsDsLetter(uint32_t c) { return c != kInvalidCodepoint && IsDeepseekLlmLetter(c); }
// [!-/:-~！-／：-～‘-‟　-。]
bool IsDsPunct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) ||
         (c >= 0x3000 && c <= 0x3002);
}
// [一-龥ࠀ-一가-퟿]
bool IsDsCjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) ||
         (c >= 0xAC00 && c <= 0xD7FF);
}

constexpr Finder kDeepseekLlm[] = {
    FindNewline,
    FindSpaceThenRun<IsDsLetter>,
    FindSpaceThenRun<IsDsPunct>,
    FindTrailingSpace,
    FindRun<IsDsCjk, false>,
    FindRun<IsN, false>,
};
constexpr Finder kDeepseekCoder[] = {
    FindNewline,
    FindSpaceThenRun<IsL>,
    FindSpaceThenRun<IsP>,
    FindRun<IsDsCjk, false>,
    FindRun<IsN, true>,
};

template <size_t N>
void SplitSequence(const Finder (&finders)[N], const Codepoints& text,
                   std::vector<std::pair<size_t, size_t>>* pieces) {
  std::vector<std::pair<size_t, size_t>> next;
  pieces->assign(1, {0, text.cps.size()});
  for (Finder find : finders) {
    next.clear();
    for (auto [lo, hi] : *pieces) {
      size_t p = lo;
      while (p < hi) {
        Span m = find(text.cps, p, hi);
        if (m.start >= hi) break;
        if (m.start > p) next.emplace_back(p, m.start);
        next.emplace_back(m.start, m.end);
        p = m.end;
      }
      if (p < hi) next.emplace_back(p, hi);
    }
    pieces->swap(next);
  }
}

std::string UnescapeNewlines(std::string s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'r' || s[i + 1] == 'n')) {
      out.push_back(s[i + 1] == 'r' ? '\r' : '\n');
      ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

const char* PreTokenizerName(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kNone: return "none";
    case PreTokenizerKind::kGpt2: return "gpt-2";
    case PreTokenizerKind::kLlama3: return "llama3";
    case PreTokenizerKind::kQwen2: return "qwen2";
    case PreTokenizerKind::kDeepseekLlm: return "deepseek-llm";
    case PreTokenizerKind::kDeepseekCoder: return "deepseek-coder";
  }
  return "unknown";
}

Result<PreTokenizerKind> PreTokenizerFromGgufName(std::string_view name) {
  if (name == "gpt-2" || name == "mpt" || name == "olmo") return PreTokenizerKind::kGpt2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "smaug-bpe" ||
      name == "dbrx") {
    return PreTokenizerKind::kLlama3;
  }
  if (name == "qwen2") return PreTokenizerKind::kQwen2;
  if (name == "deepseek-llm") return PreTokenizerKind::kDeepseekLlm;
  if (name == "deepseek-coder") return PreTokenizerKind::kDeepseekCoder;
  return Status::Unimplemented("pre-tokenizer '" + std::string(name) + "' is not supported");
}

Result<PreTokenizerKind> PreTokenizerFromPatterns(const std::vector<std::string>& patterns) {
  static constexpr std::string_view kGpt2Pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kLlama3Pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kQwen2Pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  std::vector<std::string> p;
  for (const std::string& s : patterns) p.push_back(UnescapeNewlines(s));
  if (p.size() == 1) {
    if (p[0] == UnescapeNewlines(std::string(kGpt2Pattern))) return PreTokenizerKind::kGpt2;
    if (p[0] == UnescapeNewlines(std::string(kLlama3Pattern))) return PreTokenizerKind::kLlama3;
    if (p[0] == UnescapeNewlines(std::string(kQwen2Pattern))) return PreTokenizerKind::kQwen2;
  }
  if (p.size() == 6 && p[0] == "[\r\n]" && p[1].starts_with("\\s?[A-Za-zµÀ-ÖØ-öø-ƺ") &&
      p[1].ends_with("𞤀-𞥃]+") && p[2] == "\\s?[!-/:-~！-／：-～‘-‟　-。]+" && p[3] == "\\s+$" &&
      p[4] == "[一-龥ࠀ-一가-퟿]+" && p[5] == "\\p{N}+") {
    return PreTokenizerKind::kDeepseekLlm;
  }
  if (p.size() == 5 && p[0] == "[\r\n]" && p[1] == "\\s?\\p{L}+" && p[2] == "\\s?\\p{P}+" &&
      p[3] == "[一-龥ࠀ-一가-퟿]+" && p[4] == "\\p{N}") {
    return PreTokenizerKind::kDeepseekCoder;
  }
  std::string shown;
  for (const std::string& s : patterns) shown += (shown.empty() ? "" : ", ") + ("'" + s + "'");
  return Status::Unimplemented("pre-tokenizer split pattern(s) not supported: " + shown);
}

void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>* pieces) {
  if (text.empty()) return;
  if (kind == PreTokenizerKind::kNone) {
    pieces->push_back(text);
    return;
  }
  thread_local Codepoints cps;
  Decode(text, &cps);
  const size_t n = cps.cps.size();
  auto emit = [&](size_t lo, size_t hi) {
    pieces->push_back(text.substr(cps.offsets[lo], cps.offsets[hi] - cps.offsets[lo]));
  };
  switch (kind) {
    case PreTokenizerKind::kGpt2:
    case PreTokenizerKind::kLlama3:
    case PreTokenizerKind::kQwen2: {
      size_t i = 0;
      while (i < n) {
        size_t len = kind == PreTokenizerKind::kGpt2     ? MatchGpt2(cps.cps, i, n)
                     : kind == PreTokenizerKind::kLlama3 ? MatchLlama3(cps.cps, i, n, 3)
                                                         : MatchLlama3(cps.cps, i, n, 1);
        emit(i, i + len);
        i += len;
      }
      return;
    }
    case PreTokenizerKind::kDeepseekLlm:
    case PreTokenizerKind::kDeepseekCoder: {
      std::vector<std::pair<size_t, size_t>> spans;
      if (kind == PreTokenizerKind::kDeepseekLlm) {
        SplitSequence(kDeepseekLlm, cps, &spans);
      } else {
        SplitSequence(kDeepseekCoder, cps, &spans);
      }
      for (auto [lo, hi] : spans) emit(lo, hi);
      return;
    }
    case PreTokenizerKind::kNone: return;
  }
}

}  // namespace flashroll::engine
