// The sandbox module's subcommands: `flashroll sandbox run`.
//
// Thread safety: RegisterSandboxCommands is called once at start-up.
#pragma once

#include "common/command.h"

namespace flashroll {

void RegisterSandboxCommands(Registry& registry);

}  // namespace flashroll
