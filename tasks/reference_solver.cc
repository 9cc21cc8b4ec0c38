#include "tasks/reference_solver.h"

namespace flashroll {

Result<ReferenceRun> RunReferenceSolution(const TaskFamily& family, const Task& task,
                                          Workspace& workspace, std::chrono::milliseconds step_timeout,
                                          int max_steps) {
  FR_RETURN_IF_ERROR(PrepareWorkspace(task, workspace));
  ReferenceRun run;
  std::vector<std::string> outputs;
  for (int i = 0; i < max_steps; ++i) {
    SolutionStep step = family.NextStep(task, outputs);
    if (step.command.empty()) break;
    FR_ASSIGN_OR_RETURN(ExecResult result, workspace.Exec(step.command, step_timeout));
    outputs.push_back(result.stdout_text);
    run.steps.push_back({std::move(step), std::move(result)});
  }
  std::string answer = family.FinalAnswer(task, outputs);
  while (!answer.empty() && (answer.back() == '\n' || answer.back() == ' ')) answer.pop_back();
  run.final_answer = answer;
  run.verdict = VerifyTask(task, run.final_answer, workspace);
  return run;
}

}  // namespace flashroll
