#include "common/json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <limits>

namespace flashroll {
namespace {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now so the caller sees close(2)'s error (it can report a failed
  // write-back on some filesystems).
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Unlinks a temporary file on destruction unless Release() was called.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

std::string JoinKey(const std::string& path, std::string_view key) {
  std::string out = path;
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + what);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Status CheckJsonDepth(std::string_view text, size_t max_depth, std::string_view what) {
  size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return Status::InvalidArgument(std::string(what) + ": nested deeper than " + std::to_string(max_depth) +
                                       " levels at byte " + std::to_string(i));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Status::Ok();
}

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // e.byte counts the bytes read, the failing one included.
    size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    if (offset > text.size()) offset = text.size();
    size_t line = 1;
    size_t column = 1;
    for (size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    // nlohmann's text is "[json.exception.parse_error.101] parse error at
    // line 1, column 2: <reason>"; keep only the reason.
    std::string reason = e.what();
    size_t at = reason.find("parse error");
    size_t colon = at == std::string::npos ? std::string::npos : reason.find(": ", at);
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    return Status::InvalidArgument(std::string(what) + ": parse error at byte " +
                                   std::to_string(offset) + " (line " + std::to_string(line) +
                                   ", column " + std::to_string(column) + "): " + reason);
  } catch (const Json::exception& e) {
    // A number too large for a double ("1e400") is out_of_range.406, not a
    // parse_error. Drop the "[json.exception.out_of_range.406] " prefix.
    std::string reason = e.what();
    size_t close = reason.find("] ");
    if (close != std::string::npos) reason = reason.substr(close + 2);
    return Status::InvalidArgument(std::string(what) + ": " + reason);
  }
}

std::string DumpJson(const Json& value, int indent) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

Result<Json> ReadJsonFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "open " + path);
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + path);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return ParseJson(text, path);
}

Status WriteJsonFileAtomic(const std::string& path, const Json& value, unsigned mode) {
  std::string text;
  try {
    text = value.dump(2);
  } catch (const Json::type_error& e) {
    return Status::InvalidArgument(path + ": cannot serialise: " + e.what());
  }
  text += '\n';

  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));

  std::string tmp = path + ".tmp.XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "mkostemp " + tmp);
  TempFileGuard guard(tmp);

  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    return Status::FromErrno(errno, "fchmod " + tmp);
  }
  FR_RETURN_IF_ERROR(WriteAll(fd.get(), text, tmp));
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + tmp);
  if (fd.Close() != 0) return Status::FromErrno(errno, "close " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno(errno, "rename " + tmp + " to " + path);
  }
  guard.Release();

  // The rename is durable only once the directory entry is on disk.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return Status::FromErrno(errno, "open " + dir);
  if (::fsync(dir_fd.get()) != 0) return Status::FromErrno(errno, "fsync " + dir);
  return Status::Ok();
}

Status JsonView::TypeError(std::string_view expected) const {
  return Status::InvalidArgument(path_ + ": expected " + std::string(expected) + ", got " +
                                 value_->type_name());
}

Result<std::string> JsonView::AsString() const {
  if (!value_->is_string()) return TypeError("a string");
  return value_->get<std::string>();
}

Result<int64_t> JsonView::AsInt() const {
  if (value_->is_number_unsigned()) {
    uint64_t v = value_->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(path_ + ": " + std::to_string(v) +
                                     " is out of range for a 64-bit signed integer");
    }
    return static_cast<int64_t>(v);
  }
  if (value_->is_number_integer()) return value_->get<int64_t>();
  if (value_->is_number_float()) {
    double d = value_->get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) return TypeError("an integer");
    // 2^63 is exactly representable; every double below it converts safely.
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
      return Status::InvalidArgument(path_ + ": " + value_->dump() +
                                     " is out of range for a 64-bit signed integer");
    }
    return static_cast<int64_t>(d);
  }
  return TypeError("an integer");
}

Result<uint64_t> JsonView::AsUint() const {
  if (value_->is_number_unsigned()) return value_->get<uint64_t>();
  // A signed integer built in memory (json{{"n", int64_t{5}}}) is fine when not negative.
  if (value_->is_number_integer() && value_->get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value_->get<int64_t>());
  }
  if (value_->is_number_integer() || (value_->is_number_float() && value_->get<double>() < 0)) {
    return Status::InvalidArgument(path_ + ": expected a non-negative integer, got " +
                                   value_->dump());
  }
  if (value_->is_number_float()) {
    double d = value_->get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) return TypeError("an integer");
    if (d >= 18446744073709551616.0) {
      return Status::InvalidArgument(path_ + ": " + value_->dump() +
                                     " is out of range for a 64-bit unsigned integer");
    }
    return static_cast<uint64_t>(d);
  }
  return TypeError("an integer");
}

Result<double> JsonView::AsDouble() const {
  if (!value_->is_number()) return TypeError("a number");
  return value_->get<double>();
}

Result<bool> JsonView::AsBool() const {
  if (!value_->is_boolean()) return TypeError("a boolean");
  return value_->get<bool>();
}

Result<std::vector<JsonView>> JsonView::AsArray() const {
  if (!value_->is_array()) return TypeError("an array");
  std::vector<JsonView> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) {
    out.emplace_back((*value_)[i], path_ + "[" + std::to_string(i) + "]");
  }
  return out;
}

Result<std::vector<std::string>> JsonView::AsStringArray() const {
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> items, AsArray());
  std::vector<std::string> out;
  out.reserve(items.size());
  for (const JsonView& item : items) {
    FR_ASSIGN_OR_RETURN(std::string s, item.AsString());
    out.push_back(std::move(s));
  }
  return out;
}

Status JsonView::ExpectObject() const {
  if (!value_->is_object()) return TypeError("an object");
  return Status::Ok();
}

bool JsonView::Has(std::string_view key) const {
  return value_->is_object() && value_->find(key) != value_->end();
}

Result<JsonView> JsonView::Get(std::string_view key) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  auto it = value_->find(key);
  if (it == value_->end()) return Status::InvalidArgument(JoinKey(path_, key) + ": missing");
  return JsonView(*it, JoinKey(path_, key));
}

Result<JsonView> JsonView::At(size_t i) const {
  if (!value_->is_array()) return TypeError("an array");
  std::string path = path_ + "[" + std::to_string(i) + "]";
  if (i >= value_->size()) {
    return Status::InvalidArgument(path + ": out of range (the array has " +
                                   std::to_string(value_->size()) + " elements)");
  }
  return JsonView((*value_)[i], std::move(path));
}

Result<std::string> JsonView::GetString(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsString();
}

Result<int64_t> JsonView::GetInt(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsInt();
}

Result<uint64_t> JsonView::GetUint(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsUint();
}

Result<double> JsonView::GetDouble(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsDouble();
}

Result<bool> JsonView::GetBool(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsBool();
}

Result<std::vector<std::string>> JsonView::GetStringArray(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsStringArray();
}

Result<std::vector<JsonView>> JsonView::GetArray(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  return field.AsArray();
}

Result<JsonView> JsonView::GetObject(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(JsonView field, Get(key));
  FR_RETURN_IF_ERROR(field.ExpectObject());
  return field;
}

const Json* JsonView::FindOptional(std::string_view key) const {
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::string> JsonView::GetString(std::string_view key, std::string fallback) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  const Json* field = FindOptional(key);
  if (field == nullptr) return fallback;
  return JsonView(*field, JoinKey(path_, key)).AsString();
}

Result<int64_t> JsonView::GetInt(std::string_view key, int64_t fallback) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  const Json* field = FindOptional(key);
  if (field == nullptr) return fallback;
  return JsonView(*field, JoinKey(path_, key)).AsInt();
}

Result<uint64_t> JsonView::GetUint(std::string_view key, uint64_t fallback) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  const Json* field = FindOptional(key);
  if (field == nullptr) return fallback;
  return JsonView(*field, JoinKey(path_, key)).AsUint();
}

Result<double> JsonView::GetDouble(std::string_view key, double fallback) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  const Json* field = FindOptional(key);
  if (field == nullptr) return fallback;
  return JsonView(*field, JoinKey(path_, key)).AsDouble();
}

Result<bool> JsonView::GetBool(std::string_view key, bool fallback) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  const Json* field = FindOptional(key);
  if (field == nullptr) return fallback;
  return JsonView(*field, JoinKey(path_, key)).AsBool();
}

Status JsonView::ExpectOnlyKeys(std::initializer_list<std::string_view> allowed) const {
  FR_RETURN_IF_ERROR(ExpectObject());
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    const std::string& key = it.key();
    bool known = false;
    for (std::string_view name : allowed) {
      if (key == name) {
        known = true;
        break;
      }
    }
    if (!known) return Status::InvalidArgument(path_ + ": unknown field \"" + key + "\"");
  }
  return Status::Ok();
}

}  // namespace flashroll
