// Leveled, structured logging to stderr.
//
// A line is "2026-11-29T22:55:01.123Z INFO sandbox created id=sb-12 ms=3.1":
// a timestamp, a level, a fixed message, then key=value fields (values with
// spaces are quoted). Fixed messages plus fields keep logs greppable.
// The level comes from the typed config (log.level) or --log-level, never
// from environment variables.
//
// Thread safety: all functions may be called from any thread; each line is
// written with a single write(2).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace flashroll::log {

enum class Level { kDebug = 0, kInfo, kWarn, kError, kOff };

// Parses "debug", "info", "warn", "error", "off".
Result<Level> ParseLevel(std::string_view name);
void SetLevel(Level level);
Level GetLevel();
bool Enabled(Level level);

// One key=value field; the value is already formatted.
struct Field {
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(v) {}
  Field(std::string_view k, const std::string& v) : key(k), value(v) {}
  Field(std::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
  Field(std::string_view k, double v);
  template <typename I>
    requires std::is_integral_v<I>
  Field(std::string_view k, I v) : key(k), value(std::to_string(v)) {}
  std::string_view key;
  std::string value;
};

void Write(Level level, std::string_view message, std::initializer_list<Field> fields = {});

inline void Debug(std::string_view m, std::initializer_list<Field> f = {}) { Write(Level::kDebug, m, f); }
inline void Info(std::string_view m, std::initializer_list<Field> f = {}) { Write(Level::kInfo, m, f); }
inline void Warn(std::string_view m, std::initializer_list<Field> f = {}) { Write(Level::kWarn, m, f); }
inline void Error(std::string_view m, std::initializer_list<Field> f = {}) { Write(Level::kError, m, f); }

// Formats a line without writing it (exposed for tests).
std::string FormatLine(Level level, std::string_view message, std::initializer_list<Field> fields);

}  // namespace flashroll::log
