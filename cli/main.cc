// The flashroll binary: wires each module's subcommands into one registry
// and dispatches. It holds no logic of its own.
#include <cstdio>
#include <string>
#include <vector>

#include "common/command.h"
#include "common/log.h"
#if FLASHROLL_HAVE_ENGINE && __has_include("engine/commands.h")
#define FLASHROLL_WIRE_ENGINE 1
#include "engine/commands.h"
#endif
#if FLASHROLL_HAVE_SANDBOX && __has_include("sandbox/commands.h")
#define FLASHROLL_WIRE_SANDBOX 1
#include "sandbox/commands.h"
#endif
#if FLASHROLL_HAVE_TASKS && __has_include("tasks/commands.h")
#define FLASHROLL_WIRE_TASKS 1
#include "tasks/commands.h"
#endif
#if FLASHROLL_HAVE_ROLLOUT && __has_include("rollout/commands.h")
#define FLASHROLL_WIRE_ROLLOUT 1
#include "rollout/commands.h"
#endif
#if FLASHROLL_HAVE_SCHEDULER && __has_include("scheduler/commands.h")
#define FLASHROLL_WIRE_SCHEDULER 1
#include "scheduler/commands.h"
#endif

namespace {

void PrintHelp(const flashroll::Registry& registry) {
  std::printf(
      "flashroll — agentic RL rollouts: an embedded inference engine, isolated sandboxes,\n"
      "effort-conditioned rewards and a sample-level asynchronous scheduler.\n\n"
      "usage: flashroll [--log-level debug|info|warn|error] COMMAND [ARGS...]\n\n"
      "commands:\n");
  for (const auto& command : registry.commands()) {
    std::printf("  %-18s %s\n", command.name.c_str(), command.summary.c_str());
  }
  std::printf("\nRun `flashroll COMMAND --help` for a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  flashroll::Registry registry;
  flashroll::RegisterCommonCommands(registry);
#if FLASHROLL_WIRE_ENGINE
  flashroll::RegisterEngineCommands(registry);
#endif
#if FLASHROLL_WIRE_SANDBOX
  flashroll::RegisterSandboxCommands(registry);
#endif
#if FLASHROLL_WIRE_TASKS
  flashroll::RegisterTasksCommands(registry);
#endif
#if FLASHROLL_WIRE_ROLLOUT
  flashroll::RegisterRolloutCommands(registry);
#endif
#if FLASHROLL_WIRE_SCHEDULER
  flashroll::RegisterSchedulerCommands(registry);
#endif

  std::vector<std::string> args(argv + 1, argv + argc);
  while (!args.empty() && args[0].rfind("--log-level", 0) == 0) {
    std::string value;
    if (args[0] == "--log-level" && args.size() >= 2) {
      value = args[1];
      args.erase(args.begin(), args.begin() + 2);
    } else if (args[0].rfind("--log-level=", 0) == 0) {
      value = args[0].substr(12);
      args.erase(args.begin());
    } else {
      return flashroll::ReportFailure(flashroll::Status::InvalidArgument("--log-level: missing value"));
    }
    auto level = flashroll::log::ParseLevel(value);
    if (!level.ok()) return flashroll::ReportFailure(level.status().Wrap("--log-level"));
    flashroll::log::SetLevel(*level);
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintHelp(registry);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") args[0] = "version";

  size_t words = 0;
  const flashroll::Command* command = registry.FindCommand(args, &words);
  if (command == nullptr) {
    return flashroll::ReportFailure(flashroll::Status::InvalidArgument(
        "unknown command '" + args[0] + "' (see flashroll --help)"));
  }
  return command->run(std::vector<std::string>(args.begin() + static_cast<long>(words), args.end()));
}
