// The sandbox module's subcommands: `flashroll sandbox run`, `flashroll
// sandboxd` (the node agent) and `flashroll bench sandbox`.
//
// Thread safety: RegisterSandboxCommands is called once at start-up.
#pragma once

#include "common/command.h"

namespace flashroll {

void RegisterSandboxCommands(Registry& registry);

}  // namespace flashroll
