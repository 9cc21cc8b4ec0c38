#include "engine/server/openai_response.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace flashroll::engine {
namespace {

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += len;
  }
  return true;
}

Json BytesJson(const std::string& bytes) {
  Json out = Json::array();
  for (char c : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

Json TopEntries(const Tokenizer& tokenizer, const SampledToken& s) {
  Json top = Json::array();
  for (const TokenLogprob& alt : s.top) {
    top.push_back({{"token", LogprobTokenString(tokenizer, alt.token)},
                   {"logprob", FloatJson(alt.logprob)},
                   {"bytes", BytesJson(tokenizer.TokenBytes(alt.token))}});
  }
  return top;
}

}  // namespace

Json FloatJson(float value) {
  if (!std::isfinite(value)) return Json(nullptr);
  // The float's shortest decimal read back as the nearest double: it rounds
  // back to `value` as float, and a short decimal is what the writer prints
  // for that double (nearly always; see the header).
  char buf[32];
  std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf) - 1, value);
  *r.ptr = '\0';
  return Json(std::strtod(buf, nullptr));
}

void AppendFloatJson(float value, std::string* out) {
  if (!std::isfinite(value)) {
    *out += "null";
    return;
  }
  if (value == 0) {
    *out += std::signbit(value) ? "-0.0" : "0.0";  // "-0" would read as the integer 0
    return;
  }
  char buf[64];
  std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  // A whole number whose plain form is no longer than the exponent form is
  // written with all its digits ("6111943458816"); the exponent form keeps
  // to the shortest digits ("6.1119435e+12").
  const std::string_view plain(buf, static_cast<size_t>(r.ptr - buf));
  if (plain.find_first_of(".e") == std::string_view::npos && plain.size() - (value < 0 ? 1 : 0) > 9) {
    r = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  }
  out->append(buf, r.ptr);
}

std::string LogprobTokenString(const Tokenizer& tokenizer, int32_t id) {
  std::string bytes = tokenizer.TokenBytes(id);
  if (ValidUtf8(bytes)) return bytes;
  std::string out = "bytes:";
  for (char c : bytes) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    out += buf;
  }
  return out;
}

Json EmptyCompletionLogprobs(bool with_top) {
  return Json{{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", with_top ? Json::array() : Json(nullptr)},
              {"text_offset", Json::array()}};
}

void AppendCompletionLogprobs(const Tokenizer& tokenizer, std::span<const SampledToken> samples, bool with_top,
                              size_t* text_offset, Json* logprobs) {
  for (const SampledToken& s : samples) {
    (*logprobs)["tokens"].push_back(LogprobTokenString(tokenizer, s.token));
    (*logprobs)["token_logprobs"].push_back(FloatJson(s.logprob));
    (*logprobs)["text_offset"].push_back(*text_offset);
    *text_offset += tokenizer.IsControl(s.token) ? 0 : tokenizer.TokenBytes(s.token).size();
    if (with_top) {
      Json top = Json::object();
      for (const TokenLogprob& alt : s.top) {
        const std::string key = LogprobTokenString(tokenizer, alt.token);
        if (!top.contains(key)) top[key] = FloatJson(alt.logprob);
      }
      (*logprobs)["top_logprobs"].push_back(std::move(top));
    }
  }
}

Json ChatLogprobContent(const Tokenizer& tokenizer, std::span<const SampledToken> samples, bool with_top) {
  Json content = Json::array();
  for (const SampledToken& s : samples) {
    content.push_back({{"token", LogprobTokenString(tokenizer, s.token)},
                       {"logprob", FloatJson(s.logprob)},
                       {"bytes", BytesJson(tokenizer.TokenBytes(s.token))},
                       {"top_logprobs", with_top ? TopEntries(tokenizer, s) : Json::array()}});
  }
  return content;
}

std::string NewResponseId(const char* prefix) {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ counter.fetch_add(1));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return std::string(prefix) + buf;
}

}  // namespace flashroll::engine
