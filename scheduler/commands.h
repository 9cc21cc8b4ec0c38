// The scheduler module's subcommands: `flashroll run CONFIG` (the RL job)
// and the `rl_job` config kind.
#pragma once

#include "common/command.h"

namespace flashroll {

void RegisterSchedulerCommands(Registry& registry);

}  // namespace flashroll
