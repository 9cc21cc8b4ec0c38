#include "common/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace flashroll {

FlagParser::FlagParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagParser::String(const std::string& name, std::string* out, const std::string& help) {
  flags_.push_back({name, Kind::kString, out, help});
}
void FlagParser::Int(const std::string& name, int64_t* out, const std::string& help) {
  flags_.push_back({name, Kind::kInt, out, help});
}
void FlagParser::Double(const std::string& name, double* out, const std::string& help) {
  flags_.push_back({name, Kind::kDouble, out, help});
}
void FlagParser::Bool(const std::string& name, bool* out, const std::string& help) {
  flags_.push_back({name, Kind::kBool, out, help});
}
void FlagParser::List(const std::string& name, std::vector<std::string>* out, const std::string& help) {
  flags_.push_back({name, Kind::kList, out, help});
}
void FlagParser::Positional(const std::string& name, std::vector<std::string>* out,
                            const std::string& help) {
  positional_ = out;
  positional_name_ = name;
  positional_help_ = help;
}

FlagParser::Flag* FlagParser::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Status FlagParser::Assign(Flag& flag, const std::string& value) {
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.out) = value;
      return Status::Ok();
    case Kind::kInt: {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || errno != 0 || end != value.c_str() + value.size()) {
        return Status::InvalidArgument(flag.name + ": expected an integer, got '" + value + "'");
      }
      *static_cast<int64_t*>(flag.out) = v;
      return Status::Ok();
    }
    case Kind::kDouble: {
      errno = 0;
      char* end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || errno != 0 || end != value.c_str() + value.size() || !std::isfinite(v)) {
        return Status::InvalidArgument(flag.name + ": expected a number, got '" + value + "'");
      }
      *static_cast<double*>(flag.out) = v;
      return Status::Ok();
    }
    case Kind::kBool:
      if (value == "true" || value == "1") *static_cast<bool*>(flag.out) = true;
      else if (value == "false" || value == "0") *static_cast<bool*>(flag.out) = false;
      else return Status::InvalidArgument(flag.name + ": expected true or false, got '" + value + "'");
      return Status::Ok();
    case Kind::kList:
      static_cast<std::vector<std::string>*>(flag.out)->push_back(value);
      return Status::Ok();
  }
  return Status::Internal("unhandled flag kind");
}

Status FlagParser::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (positional_ == nullptr && i + 1 < args.size()) {
        return Status::InvalidArgument("unexpected argument '" + args[i + 1] + "'");
      }
      for (size_t j = i + 1; j < args.size(); ++j) positional_->push_back(args[j]);
      return Status::Ok();
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      if (positional_ == nullptr) return Status::InvalidArgument("unexpected argument '" + arg + "'");
      positional_->push_back(arg);
      continue;
    }
    std::string name = arg;
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr) return Status::InvalidArgument("unknown flag '" + name + "' (see --help)");
    flag->seen = true;
    if (flag->kind == Kind::kBool) {
      if (has_value) FR_RETURN_IF_ERROR(Assign(*flag, value));
      else *static_cast<bool*>(flag->out) = true;
      continue;
    }
    if (has_value) {
      FR_RETURN_IF_ERROR(Assign(*flag, value));
      continue;
    }
    if (flag->kind == Kind::kList) {
      size_t taken = 0;
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        FR_RETURN_IF_ERROR(Assign(*flag, args[++i]));
        ++taken;
      }
      if (taken == 0) return Status::InvalidArgument(name + ": missing value");
      continue;
    }
    if (i + 1 >= args.size()) return Status::InvalidArgument(name + ": missing value");
    FR_RETURN_IF_ERROR(Assign(*flag, args[++i]));
  }
  return Status::Ok();
}

std::string FlagParser::Usage() const {
  std::string out = "usage: " + usage_ + "\n";
  if (!description_.empty()) out += "\n" + description_ + "\n";
  if (!flags_.empty() || positional_ != nullptr) out += "\nflags:\n";
  for (const Flag& f : flags_) {
    std::string left = "  " + f.name;
    if (f.kind == Kind::kList) left += " VALUE...";
    else if (f.kind != Kind::kBool) left += " VALUE";
    if (left.size() < 26) left.resize(26, ' ');
    else left += "\n" + std::string(26, ' ');
    out += left + f.help + "\n";
  }
  if (positional_ != nullptr) {
    std::string left = "  " + positional_name_;
    if (left.size() < 26) left.resize(26, ' ');
    out += left + positional_help_ + "\n";
  }
  out += "  --help                  show this help\n";
  return out;
}

std::optional<int> FlagParser::ParseOrExit(const std::vector<std::string>& args) {
  Status status = Parse(args);
  if (help_requested_) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "flashroll: %s\n", status.message().c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace flashroll
