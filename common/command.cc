#include "common/command.h"

#include <cstdio>

#include "common/flags.h"

namespace flashroll {

void Registry::AddCommand(Command command) { commands_.push_back(std::move(command)); }

void Registry::AddConfigKind(const std::string& kind, ConfigValidator validator) {
  config_kinds_.insert_or_assign(kind, std::move(validator));
}

const Command* Registry::FindCommand(const std::vector<std::string>& args, size_t* words) const {
  const Command* best = nullptr;
  size_t best_words = 0;
  for (const Command& command : commands_) {
    size_t n = 0;
    size_t pos = 0;
    bool match = true;
    while (pos <= command.name.size()) {
      size_t space = command.name.find(' ', pos);
      if (space == std::string::npos) space = command.name.size();
      if (n >= args.size() || args[n] != command.name.substr(pos, space - pos)) {
        match = false;
        break;
      }
      ++n;
      pos = space + 1;
    }
    if (match && n > best_words) {
      best = &command;
      best_words = n;
    }
  }
  *words = best_words;
  return best;
}

const ConfigValidator* Registry::FindConfigKind(const std::string& kind) const {
  auto it = config_kinds_.find(kind);
  return it == config_kinds_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::ConfigKinds() const {
  std::vector<std::string> kinds;
  for (const auto& [kind, schema] : config_kinds_) kinds.push_back(kind);
  return kinds;
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kCorruption: return 2;
    default: return 1;
  }
}

int ReportFailure(const Status& status) {
  std::string message = status.message();
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  std::fprintf(stderr, "flashroll: %s\n", message.c_str());
  return ExitCodeFor(status);
}

namespace {

int RunVersion(const std::vector<std::string>& args) {
  FlagParser flags("flashroll version", "Prints the Flashroll version.");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  std::printf("flashroll %s\n", FLASHROLL_VERSION);
  return 0;
}

Status CheckConfig(const Registry& registry, const std::string& path) {
  FR_ASSIGN_OR_RETURN(ConfigFile file, LoadYamlFile(path));
  FR_ASSIGN_OR_RETURN(std::string kind, ConfigKind(file));
  const ConfigValidator* validate = registry.FindConfigKind(kind);
  if (validate == nullptr) {
    std::string known;
    for (const auto& k : registry.ConfigKinds()) known += (known.empty() ? "" : ", ") + k;
    return file.ErrorAt(file.root["kind"], "kind",
                        "unknown config kind '" + kind + "' (known: " + known + ")");
  }
  return (*validate)(file);
}

}  // namespace

void RegisterCommonCommands(Registry& registry) {
  registry.AddCommand({"version", "print the version", RunVersion});
  const Registry* self = &registry;
  registry.AddCommand({"config check", "validate a YAML config file of any kind",
                       [self](const std::vector<std::string>& args) {
                         std::vector<std::string> files;
                         FlagParser flags("flashroll config check FILE...",
                                          "Validates config files against the schema named by their "
                                          "top-level `kind:`. Exit 0 when all are valid; otherwise "
                                          "exit 2 with file:line: key: what is wrong.");
                         flags.Positional("FILE...", &files, "YAML config files");
                         if (auto exit = flags.ParseOrExit(args)) return *exit;
                         if (files.empty()) return ReportFailure(Status::InvalidArgument("config check: no FILE given"));
                         for (const auto& path : files) {
                           Status status = CheckConfig(*self, path);
                           if (!status.ok()) return ReportFailure(status);
                           std::printf("%s: ok\n", path.c_str());
                         }
                         return 0;
                       }});
}

}  // namespace flashroll
