// The sandbox module's subcommands: `flashroll sandbox run`, `flashroll
// sandboxd` (the node agent), `flashroll image import` and `flashroll bench
// sandbox`, and the `sandboxd` config kind.
//
// Thread safety: RegisterSandboxCommands is called once at start-up.
#pragma once

#include "common/command.h"

namespace flashroll {

void RegisterSandboxCommands(Registry& registry);

}  // namespace flashroll
