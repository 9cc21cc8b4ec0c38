// The rollout module's subcommands: `flashroll rollout demos` (synthesise
// demonstration trajectories as JSONL).
#pragma once

#include "common/command.h"

namespace flashroll {

void RegisterRolloutCommands(Registry& registry);

}  // namespace flashroll
