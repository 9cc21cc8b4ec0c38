#include "common/config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flashroll {
namespace {

int LineOf(const YAML::Node& node, int fallback) {
  if (!node.IsDefined()) return fallback;
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

std::string JoinPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

Status ErrorAt(std::string_view file, int line, const std::string& path, const std::string& what) {
  std::string message(file);
  if (line > 0) message += ":" + std::to_string(line);
  message += ": ";
  message += path.empty() ? "(top level)" : path;
  message += ": " + what;
  return Status::InvalidArgument(std::move(message));
}

const char* TypeName(Schema::Type type) {
  switch (type) {
    case Schema::Type::kMap: return "a map";
    case Schema::Type::kList: return "a list";
    case Schema::Type::kString: return "a string";
    case Schema::Type::kInt: return "an integer";
    case Schema::Type::kFloat: return "a number";
    case Schema::Type::kBool: return "true or false";
    case Schema::Type::kEnum: return "one of the listed values";
    case Schema::Type::kDuration: return "a duration such as 10s or 250ms";
    case Schema::Type::kByteSize: return "a size such as 256M";
    case Schema::Type::kAny: return "any value";
  }
  return "?";
}

std::string Describe(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsNull()) return "nothing";
  return "'" + node.Scalar() + "'";
}

// Strict integer parse: the whole scalar must be an integer.
bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool ParseFloat(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool ParseBool(const std::string& s, bool* out) {
  if (s == "true" || s == "True" || s == "TRUE") {
    *out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    *out = false;
    return true;
  }
  return false;
}

}  // namespace

Schema Schema::Map() { return Schema(Type::kMap); }
Schema Schema::List(Schema item, size_t min_items) {
  Schema s(Type::kList);
  s.item_ = std::make_shared<Schema>(std::move(item));
  s.min_items_ = min_items;
  return s;
}
Schema Schema::String() { return Schema(Type::kString); }
Schema Schema::Int(int64_t min, int64_t max) {
  Schema s(Type::kInt);
  s.imin_ = min;
  s.imax_ = max;
  return s;
}
Schema Schema::Float(double min, double max) {
  Schema s(Type::kFloat);
  s.min_ = min;
  s.max_ = max;
  return s;
}
Schema Schema::Bool() { return Schema(Type::kBool); }
Schema Schema::Enum(std::vector<std::string> values) {
  Schema s(Type::kEnum);
  s.enum_ = std::move(values);
  return s;
}
Schema Schema::Duration(int64_t min_ms, int64_t max_ms) {
  Schema s(Type::kDuration);
  s.imin_ = min_ms;
  s.imax_ = max_ms;
  return s;
}
Schema Schema::ByteSize(uint64_t min, uint64_t max) {
  Schema s(Type::kByteSize);
  s.umin_ = min;
  s.umax_ = max;
  return s;
}
Schema Schema::Any() { return Schema(Type::kAny); }

Schema& Schema::Required(const std::string& key, Schema value) {
  fields_.push_back({key, std::make_shared<Schema>(std::move(value)), true});
  return *this;
}

Schema& Schema::Optional(const std::string& key, Schema value) {
  fields_.push_back({key, std::make_shared<Schema>(std::move(value)), false});
  return *this;
}

Status Schema::Validate(const YAML::Node& node, std::string_view file) const {
  return ValidateAt(node, file, "", 1);
}

Status Schema::ValidateAt(const YAML::Node& node, std::string_view file, const std::string& path,
                          int line) const {
  line = LineOf(node, line);
  if (type_ == Type::kAny) return Status::Ok();
  if (type_ == Type::kMap) {
    if (!node.IsMap()) return ErrorAt(file, line, path, std::string("expected ") + TypeName(type_) + ", got " + Describe(node));
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.Scalar();
      bool known = false;
      for (const Field& f : fields_) known = known || f.key == key;
      if (!known) {
        std::string expected;
        for (const Field& f : fields_) expected += (expected.empty() ? "" : ", ") + f.key;
        return ErrorAt(file, LineOf(it->first, line), JoinPath(path, key),
                       "unknown key (expected one of: " + expected + ")");
      }
    }
    for (const Field& f : fields_) {
      const YAML::Node child = node[f.key];
      if (!child.IsDefined() || child.IsNull()) {
        if (f.required) return ErrorAt(file, line, JoinPath(path, f.key), "missing required key");
        continue;
      }
      FR_RETURN_IF_ERROR(f.schema->ValidateAt(child, file, JoinPath(path, f.key), line));
    }
    return Status::Ok();
  }
  if (type_ == Type::kList) {
    if (!node.IsSequence()) return ErrorAt(file, line, path, std::string("expected a list, got ") + Describe(node));
    if (node.size() < min_items_) {
      return ErrorAt(file, line, path, "expected at least " + std::to_string(min_items_) + " items, got " + std::to_string(node.size()));
    }
    for (size_t i = 0; i < node.size(); ++i) {
      FR_RETURN_IF_ERROR(item_->ValidateAt(node[i], file, path + "[" + std::to_string(i) + "]", line));
    }
    return Status::Ok();
  }
  if (!node.IsScalar()) {
    return ErrorAt(file, line, path, std::string("expected ") + TypeName(type_) + ", got " + Describe(node));
  }
  const std::string& text = node.Scalar();
  switch (type_) {
    case Type::kString:
      return Status::Ok();
    case Type::kInt: {
      int64_t v = 0;
      if (!ParseInt(text, &v)) return ErrorAt(file, line, path, "expected an integer, got '" + text + "'");
      if (v < imin_ || v > imax_) {
        return ErrorAt(file, line, path, "value " + text + " out of range [" + std::to_string(imin_) + ", " + std::to_string(imax_) + "]");
      }
      return Status::Ok();
    }
    case Type::kFloat: {
      double v = 0;
      if (!ParseFloat(text, &v)) return ErrorAt(file, line, path, "expected a number, got '" + text + "'");
      if (v < min_ || v > max_) {
        std::ostringstream range;
        range << "value " << text << " out of range [" << min_ << ", " << max_ << "]";
        return ErrorAt(file, line, path, range.str());
      }
      return Status::Ok();
    }
    case Type::kBool: {
      bool v = false;
      if (!ParseBool(text, &v)) return ErrorAt(file, line, path, "expected true or false, got '" + text + "'");
      return Status::Ok();
    }
    case Type::kEnum: {
      for (const auto& e : enum_) {
        if (e == text) return Status::Ok();
      }
      std::string expected;
      for (const auto& e : enum_) expected += (expected.empty() ? "" : ", ") + e;
      return ErrorAt(file, line, path, "'" + text + "' is not one of: " + expected);
    }
    case Type::kDuration: {
      auto d = ParseDuration(text);
      if (!d.ok()) return ErrorAt(file, line, path, d.status().message());
      if (d->count() < imin_ || d->count() > imax_) {
        return ErrorAt(file, line, path, "duration " + text + " out of range [" + std::to_string(imin_) + "ms, " + std::to_string(imax_) + "ms]");
      }
      return Status::Ok();
    }
    case Type::kByteSize: {
      auto b = ParseByteSize(text);
      if (!b.ok()) return ErrorAt(file, line, path, b.status().message());
      if (*b < umin_ || *b > umax_) {
        return ErrorAt(file, line, path, "size " + text + " out of range [" + std::to_string(umin_) + ", " + std::to_string(umax_) + "] bytes");
      }
      return Status::Ok();
    }
    default:
      return Status::Internal("unhandled schema type");
  }
}

Status ConfigFile::ErrorAt(const YAML::Node& node, std::string_view key, std::string_view message) const {
  return flashroll::ErrorAt(path, LineOf(node, 0), std::string(key), std::string(message));
}

Result<ConfigFile> ParseYaml(const std::string& text, const std::string& name) {
  try {
    ConfigFile file{name, YAML::Load(text)};
    if (!file.root.IsDefined() || file.root.IsNull()) {
      return Status::InvalidArgument(name + ":1: (top level): the file is empty");
    }
    return file;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(name + ":" + std::to_string(e.mark.line + 1) +
                                   ": (syntax): " + e.msg);
  }
}

Result<ConfigFile> LoadYamlFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::FromErrno(errno, "open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::FromErrno(errno, "read " + path);
  return ParseYaml(buffer.str(), path);
}

Result<std::string> ConfigKind(const ConfigFile& file) {
  if (!file.root.IsMap()) {
    return flashroll::ErrorAt(file.path, LineOf(file.root, 1), "", "expected a map with a 'kind' key");
  }
  const YAML::Node kind = file.root["kind"];
  if (!kind.IsDefined() || kind.IsNull()) {
    return flashroll::ErrorAt(file.path, LineOf(file.root, 1), "kind", "missing required key");
  }
  if (!kind.IsScalar()) return file.ErrorAt(kind, "kind", "expected a string");
  return kind.Scalar();
}

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  double value = 0;
  if (i == 0 || !ParseFloat(s.substr(0, i), &value)) {
    return Status::InvalidArgument("expected a duration such as 10s or 250ms, got '" + s + "'");
  }
  const std::string unit = s.substr(i);
  double ms = 0;
  if (unit == "ms") ms = value;
  else if (unit == "s" || unit.empty()) ms = value * 1e3;
  else if (unit == "m") ms = value * 60e3;
  else if (unit == "h") ms = value * 3600e3;
  else return Status::InvalidArgument("unknown duration unit '" + unit + "' in '" + s + "' (use ms, s, m or h)");
  if (ms > 9.2e18) return Status::InvalidArgument("duration '" + s + "' is too large");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  double value = 0;
  if (i == 0 || !ParseFloat(s.substr(0, i), &value)) {
    return Status::InvalidArgument("expected a size such as 256M or 1G, got '" + s + "'");
  }
  // Binary multiples; "M", "MB", "Mi" and "MiB" all mean 2^20, as in cgroup and docker flags.
  std::string unit = s.substr(i);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  const std::string units = "BKMGT";
  double multiplier = 1;
  if (!unit.empty()) {
    const size_t power = unit.size() == 1 ? units.find(static_cast<char>(std::toupper(unit[0]))) : std::string::npos;
    if (power == std::string::npos) {
      return Status::InvalidArgument("unknown size unit '" + s.substr(i) + "' in '" + s + "' (use K, M, G or T)");
    }
    multiplier = std::pow(1024.0, static_cast<double>(power));
  }
  const double bytes = value * multiplier;
  if (bytes > 1.8e19) return Status::InvalidArgument("size '" + s + "' is too large");
  // Rounded as a double: llround would overflow past INT64_MAX (9.2e18).
  return static_cast<uint64_t>(std::round(bytes));
}

std::string ReadString(const YAML::Node& map, const char* key, const std::string& fallback) {
  const YAML::Node n = map[key];
  return n.IsDefined() && n.IsScalar() ? n.Scalar() : fallback;
}

int64_t ReadInt(const YAML::Node& map, const char* key, int64_t fallback) {
  const YAML::Node n = map[key];
  int64_t v = 0;
  return n.IsDefined() && n.IsScalar() && ParseInt(n.Scalar(), &v) ? v : fallback;
}

double ReadFloat(const YAML::Node& map, const char* key, double fallback) {
  const YAML::Node n = map[key];
  double v = 0;
  return n.IsDefined() && n.IsScalar() && ParseFloat(n.Scalar(), &v) ? v : fallback;
}

bool ReadBool(const YAML::Node& map, const char* key, bool fallback) {
  const YAML::Node n = map[key];
  bool v = false;
  return n.IsDefined() && n.IsScalar() && ParseBool(n.Scalar(), &v) ? v : fallback;
}

std::chrono::milliseconds ReadDuration(const YAML::Node& map, const char* key,
                                       std::chrono::milliseconds fallback) {
  const YAML::Node n = map[key];
  if (!n.IsDefined() || !n.IsScalar()) return fallback;
  auto d = ParseDuration(n.Scalar());
  return d.ok() ? *d : fallback;
}

uint64_t ReadByteSize(const YAML::Node& map, const char* key, uint64_t fallback) {
  const YAML::Node n = map[key];
  if (!n.IsDefined() || !n.IsScalar()) return fallback;
  auto b = ParseByteSize(n.Scalar());
  return b.ok() ? *b : fallback;
}

std::vector<std::string> ReadStringList(const YAML::Node& map, const char* key) {
  std::vector<std::string> out;
  const YAML::Node n = map[key];
  if (!n.IsDefined() || !n.IsSequence()) return out;
  for (const auto& item : n) out.push_back(item.Scalar());
  return out;
}

}  // namespace flashroll
