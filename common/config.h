// YAML configuration: loading, schema validation and typed reading.
//
// Every config file has a top-level `kind:` naming its schema (registered by
// the module that owns it, see command.h). Validation reports the first
// problem as "file:line: key.path: what is wrong" — an unknown key, a wrong
// type, a missing required key, a value out of range. After validation the
// owning module reads the node into its typed struct; nothing else in the
// program looks at YAML.
//
// Thread safety: Schema objects are immutable after construction and may be
// shared; ConfigFile is a value.
#pragma once

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flashroll {

// A schema for one YAML value. Built with the static constructors and the
// Required/Optional chain for maps:
//   Schema::Map().Required("kind", Schema::Enum({"rl_job"}))
//                .Optional("threads", Schema::Int(1, 256))
class Schema {
 public:
  enum class Type { kMap, kList, kString, kInt, kFloat, kBool, kEnum, kDuration, kByteSize, kAny };

  static Schema Map();
  static Schema List(Schema item, size_t min_items = 0);
  static Schema String();
  static Schema Int(int64_t min = std::numeric_limits<int64_t>::min(),
                    int64_t max = std::numeric_limits<int64_t>::max());
  static Schema Float(double min = -std::numeric_limits<double>::infinity(),
                      double max = std::numeric_limits<double>::infinity());
  static Schema Bool();
  static Schema Enum(std::vector<std::string> values);
  // "10s", "250ms", "2m", "1h"; bounds in milliseconds.
  static Schema Duration(int64_t min_ms = 0, int64_t max_ms = std::numeric_limits<int64_t>::max());
  // "256M", "1G", "4096", "64K" (powers of 1024); bounds in bytes.
  static Schema ByteSize(uint64_t min = 0, uint64_t max = std::numeric_limits<uint64_t>::max());
  // Any YAML value; for free-form maps such as environment variables.
  static Schema Any();

  Schema& Required(const std::string& key, Schema value);
  Schema& Optional(const std::string& key, Schema value);

  Type type() const { return type_; }

  // Validates `node` against this schema. `file` prefixes messages.
  Status Validate(const YAML::Node& node, std::string_view file) const;

 private:
  struct Field {
    std::string key;
    std::shared_ptr<Schema> schema;
    bool required;
  };
  explicit Schema(Type type) : type_(type) {}
  Status ValidateAt(const YAML::Node& node, std::string_view file, const std::string& path,
                    int line) const;

  Type type_;
  std::vector<Field> fields_;       // kMap
  std::shared_ptr<Schema> item_;    // kList
  size_t min_items_ = 0;            // kList
  std::vector<std::string> enum_;   // kEnum
  double min_ = 0, max_ = 0;        // kFloat
  int64_t imin_ = 0, imax_ = 0;     // kInt, kDuration
  uint64_t umin_ = 0, umax_ = 0;    // kByteSize
};

// A parsed YAML file and its name, for messages.
struct ConfigFile {
  std::string path;
  YAML::Node root;

  // "path:line: key: message" for a node of this file (line is 1-based).
  Status ErrorAt(const YAML::Node& node, std::string_view key, std::string_view message) const;
};

// Reads and parses a YAML file. Syntax errors become "path:line: ...".
Result<ConfigFile> LoadYamlFile(const std::string& path);
Result<ConfigFile> ParseYaml(const std::string& text, const std::string& name);

// The top-level `kind:` of a config, or an error naming the key.
Result<std::string> ConfigKind(const ConfigFile& file);

Result<std::chrono::milliseconds> ParseDuration(std::string_view text);
Result<uint64_t> ParseByteSize(std::string_view text);

// Typed reads of an already validated node; `fallback` when the key is absent.
std::string ReadString(const YAML::Node& map, const char* key, const std::string& fallback);
int64_t ReadInt(const YAML::Node& map, const char* key, int64_t fallback);
double ReadFloat(const YAML::Node& map, const char* key, double fallback);
bool ReadBool(const YAML::Node& map, const char* key, bool fallback);
std::chrono::milliseconds ReadDuration(const YAML::Node& map, const char* key,
                                       std::chrono::milliseconds fallback);
uint64_t ReadByteSize(const YAML::Node& map, const char* key, uint64_t fallback);
std::vector<std::string> ReadStringList(const YAML::Node& map, const char* key);

}  // namespace flashroll
