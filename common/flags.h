// FlagParser: the command-line flags of one subcommand, with --help.
//
// Accepts "--name value" and "--name=value". A list flag takes every
// following argument up to the next one that starts with "--". Arguments
// after "--" and arguments that are not flags go to the positional list.
// Errors name the flag: "--max-tokens: expected an integer, got 'ten'".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll {

class FlagParser {
 public:
  // usage: "flashroll sandbox run [flags] -- CMD ARGS..."; description: a paragraph.
  FlagParser(std::string usage, std::string description);

  void String(const std::string& name, std::string* out, const std::string& help);
  void Int(const std::string& name, int64_t* out, const std::string& help);
  void Double(const std::string& name, double* out, const std::string& help);
  void Bool(const std::string& name, bool* out, const std::string& help);  // takes no value
  void List(const std::string& name, std::vector<std::string>* out, const std::string& help);
  // Where positional arguments go; without this call they are an error.
  void Positional(const std::string& name, std::vector<std::string>* out, const std::string& help);

  Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  std::string Usage() const;

  // Parses; on --help prints usage to stdout and returns 0; on error prints
  // a one-line reason and returns 2; returns nullopt to go on.
  std::optional<int> ParseOrExit(const std::vector<std::string>& args);

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kList };
  struct Flag {
    std::string name;
    Kind kind;
    void* out;
    std::string help;
    bool seen = false;
  };
  Flag* Find(const std::string& name);
  Status Assign(Flag& flag, const std::string& value);

  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<std::string>* positional_ = nullptr;
  std::string positional_name_;
  std::string positional_help_;
  bool help_requested_ = false;
};

}  // namespace flashroll
