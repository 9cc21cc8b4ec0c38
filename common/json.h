// JSON at the edges: parsing text into nlohmann::json, reading typed fields
// with errors that name the field path, and JSON files written atomically.
//
// JSON stays at module edges (HTTP bodies, state files); code inside a module
// works on typed structs filled through JsonView. nlohmann throws; every
// function here catches and returns Status instead.
//
// Thread safety: free functions are reentrant. A JsonView refers to a json
// value it does not own; it is safe to use from several threads as long as
// nobody modifies the value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace flashroll {

using Json = nlohmann::json;

// Parses `text` as one JSON document. On failure returns kInvalidArgument
// "<what>: parse error at byte B (line L, column C): <reason>", where B is
// the 0-based offset of the byte the parser stopped at.
Result<Json> ParseJson(std::string_view text, std::string_view what = "json");

// Checks, without parsing, that `text` nests arrays and objects at most
// `max_depth` deep (brackets inside strings do not count): a parser
// recursing a million `[` deep costs its memory before it can fail.
// Returns kInvalidArgument "<what>: nested deeper than N levels at byte B".
Status CheckJsonDepth(std::string_view text, size_t max_depth, std::string_view what = "json");

// Serialises `value` compactly (indent < 0) or pretty-printed. Strings that
// are not valid UTF-8 have the bad bytes replaced by U+FFFD, so output bytes
// from a process never make serialisation fail; use it for network replies.
std::string DumpJson(const Json& value, int indent = -1);

// Reads and parses the JSON file at `path`. Errors: the open/read syscall
// (kNotFound, kPermissionDenied, kIoError, ...) or kInvalidArgument naming the
// path and the parse error's position.
Result<Json> ReadJsonFile(const std::string& path);

// Replaces `path` with `value` (pretty-printed, trailing newline) atomically:
// writes a temporary file in the same directory, fsyncs it, renames it over
// `path` and fsyncs the directory, so readers see the old or the new file and
// never a torn one, even after a crash. The file gets permission bits `mode`.
// Returns kInvalidArgument if a string is not valid UTF-8 (stored data is
// never silently altered), or the failing syscall's Status; on failure the
// temporary file is removed and `path` is unchanged.
Status WriteJsonFileAtomic(const std::string& path, const Json& value, unsigned mode = 0644);

// A read-only view of a JSON value plus the path that reached it ("body",
// "body.cmd", "body.cmd[2]"), so that a type or presence error names the exact
// field: "body.cmd[2]: expected a string, got number". All errors are
// kInvalidArgument. The viewed value must outlive the view.
class JsonView {
 public:
  JsonView(const Json& value, std::string path) : value_(&value), path_(std::move(path)) {}
  // A view of a temporary would dangle at the end of the statement.
  JsonView(Json&& value, std::string path) = delete;

  const Json& value() const { return *value_; }
  const std::string& path() const { return path_; }

  // Value conversions. Integers accept JSON integers and integral floats
  // within range (3.0 is 3; 3.5 and 1e30 are errors).
  Result<std::string> AsString() const;
  Result<int64_t> AsInt() const;
  Result<uint64_t> AsUint() const;  // rejects negative numbers
  Result<double> AsDouble() const;
  Result<bool> AsBool() const;
  Result<std::vector<JsonView>> AsArray() const;
  Result<std::vector<std::string>> AsStringArray() const;
  // OK if the value is an object, else "<path>: expected an object, got <type>".
  Status ExpectObject() const;

  // Fields of an object. Has() is false for a missing key and for a
  // non-object. Get() fails with "<path>.<key>: missing" (or the
  // ExpectObject error) and otherwise returns the field's view.
  bool Has(std::string_view key) const;
  Result<JsonView> Get(std::string_view key) const;
  // The i-th element of an array: "<path>[i]"; fails on a non-array or i out of range.
  Result<JsonView> At(size_t i) const;

  // Required fields: missing or wrong type is an error.
  Result<std::string> GetString(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<uint64_t> GetUint(std::string_view key) const;
  Result<double> GetDouble(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<JsonView>> GetArray(std::string_view key) const;
  Result<JsonView> GetObject(std::string_view key) const;

  // Optional fields: a missing key or a JSON null yields `fallback`; a
  // present value of the wrong type is still an error.
  Result<std::string> GetString(std::string_view key, std::string fallback) const;
  Result<int64_t> GetInt(std::string_view key, int64_t fallback) const;
  Result<uint64_t> GetUint(std::string_view key, uint64_t fallback) const;
  Result<double> GetDouble(std::string_view key, double fallback) const;
  Result<bool> GetBool(std::string_view key, bool fallback) const;

  // Rejects keys outside `allowed` ("<path>: unknown field \"imgae\""), so a
  // typo in a request is reported instead of silently ignored. Fails on a
  // non-object too.
  Status ExpectOnlyKeys(std::initializer_list<std::string_view> allowed) const;

 private:
  Status TypeError(std::string_view expected) const;
  // The field `key` when present and not null; nullptr otherwise.
  const Json* FindOptional(std::string_view key) const;

  const Json* value_;
  std::string path_;
};

}  // namespace flashroll
