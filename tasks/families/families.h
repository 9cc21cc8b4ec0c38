// The built-in task families (internal to tasks/; use FindTaskFamily).
#pragma once

#include "tasks/task.h"

namespace flashroll::families {

const TaskFamily& Arithmetic();
const TaskFamily& FileSum();
const TaskFamily& FindLine();
const TaskFamily& Inventory();
const TaskFamily& LookupChain();

// "<family>-<seed>-d<difficulty>"
std::string TaskId(const char* family, uint64_t seed, int difficulty);

}  // namespace flashroll::families
