// The registry of `flashroll` subcommands and config kinds.
//
// Each module owns its subcommands and the schemas of its config kinds and
// registers them here through a Register*(Registry&) function; cli/ only
// calls those functions and dispatches. A subcommand receives the arguments
// after its name and returns the process exit code.
//
// Exit codes across the CLI: 0 success; 1 the work failed; 2 bad input
// (usage, config, model or request files) with a one-line reason.
//
// Thread safety: filled once at start-up, then read-only.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace flashroll {

using ConfigValidator = std::function<Status(const ConfigFile&)>;

struct Command {
  std::string name;     // words, e.g. "config check" or "sandbox run"
  std::string summary;  // one line shown by `flashroll --help`
  std::function<int(const std::vector<std::string>& args)> run;
};

class Registry {
 public:
  void AddCommand(Command command);
  // Registers the validator of YAML files whose top-level `kind:` is `kind`:
  // the owning module's parser, so schema and cross-field rules both apply.
  void AddConfigKind(const std::string& kind, ConfigValidator validator);

  // Finds the command whose name matches the most leading words of `args`.
  // Returns nullptr when none does; *words is set to the words matched.
  const Command* FindCommand(const std::vector<std::string>& args, size_t* words) const;
  const std::vector<Command>& commands() const { return commands_; }

  // nullptr when the kind is not registered.
  const ConfigValidator* FindConfigKind(const std::string& kind) const;
  std::vector<std::string> ConfigKinds() const;

 private:
  std::vector<Command> commands_;
  std::map<std::string, ConfigValidator> config_kinds_;
};

// Exit code for a failed Status: 2 for bad input, 1 otherwise.
int ExitCodeFor(const Status& status);

// Prints "flashroll: <message>" on one line to stderr and returns ExitCodeFor(status).
int ReportFailure(const Status& status);

// Registers `version` and `config check`.
void RegisterCommonCommands(Registry& registry);

}  // namespace flashroll
