// Runs a family's reference solution for a task, for real, in a workspace.
//
// Used to check that generators, solutions and verifiers agree (tests) and to
// synthesise demonstrations whose tool outputs are real, not imagined.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "tasks/task.h"
#include "tasks/workspace.h"

namespace flashroll {

struct ReferenceStep {
  SolutionStep step;
  ExecResult result;
};

struct ReferenceRun {
  std::vector<ReferenceStep> steps;
  std::string final_answer;
  Verdict verdict;
};

// Prepares `workspace` with the task's files, then runs steps until the family
// says the solution is complete (at most `max_steps`). Fails when a step
// cannot be executed; a wrong answer is reported in the verdict, not as an error.
Result<ReferenceRun> RunReferenceSolution(const TaskFamily& family, const Task& task,
                                          Workspace& workspace,
                                          std::chrono::milliseconds step_timeout = std::chrono::seconds(10),
                                          int max_steps = 16);

}  // namespace flashroll
