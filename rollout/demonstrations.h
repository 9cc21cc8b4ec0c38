// Demonstrations: complete agent trajectories synthesised from a task
// family's reference solution, with every tool call executed for real, in
// a scaffold's format and at a reasoning effort b. They are the training data
// of the default models (models/) and a check that scaffolds and tasks agree.
//
// The reasoning section of each assistant message grows with b, so that
// effort conditioning has something to act on: about 1 + 12·b/100 sentences
// in the first turn and 1 + 4·b/100 in later ones.
//
// Thread safety: functions are reentrant; a Workspace is per call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "rollout/scaffold.h"
#include "tasks/task.h"

namespace flashroll {

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
};

struct Demonstration {
  std::string task_id;
  std::string family;
  int difficulty = 1;
  int effort = 100;
  std::string scaffold;
  std::vector<ChatMessage> messages;
  bool success = false;  // the verifier's verdict on the final answer
  size_t reasoning_chars = 0;
};

// Runs the reference solution of `task` in a fresh LocalWorkspace and writes
// it as a conversation. `seed` picks the wording of the reasoning.
Result<Demonstration> SynthesizeDemonstration(const TaskFamily& family, const Task& task,
                                              const Scaffold& scaffold, int effort, uint64_t seed);

nlohmann::json DemonstrationToJson(const Demonstration& demo);

}  // namespace flashroll
