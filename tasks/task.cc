#include "tasks/task.h"


#include "common/strings.h"
#include "tasks/families/families.h"

namespace flashroll {

bool VerdictReadsWorkspace(const Task& task) {
  return !task.answer_file.empty() || task.check.kind == "python" || task.check.kind == "tests";
}

Verdict VerifyTask(const Task& task, const std::string& final_answer, Workspace& workspace) {
  std::string got = final_answer;
  if (!task.answer_file.empty()) {
    auto contents = workspace.ReadFile(task.answer_file);
    if (!contents.ok()) return {false, task.answer_file + " was not written"};
    got = *contents;
  }
  return Verify(task.check, task.answer, got, workspace);
}

Status PrepareWorkspace(const Task& task, Workspace& workspace) {
  for (const TaskFile& file : task.files) {
    FR_RETURN_IF_ERROR(workspace.WriteFile(file.path, file.contents).Wrap("task " + task.id));
  }
  for (size_t i = 0; i < task.setup.size(); ++i) {
    const std::string what = "task " + task.id + ": setup[" + std::to_string(i) + "] '" + task.setup[i] + "'";
    FR_ASSIGN_OR_RETURN(ExecResult result, workspace.Exec(task.setup[i], std::chrono::seconds(120)));
    if (result.timed_out) return Status::DeadlineExceeded(what + ": timed out");
    if (result.exit_code != 0) {
      return Status::FailedPrecondition(what + ": exit " + std::to_string(result.exit_code) + ": " +
                                        std::string(TrimWhitespace(result.stderr_text)).substr(0, 200));
    }
  }
  return Status::Ok();
}

std::vector<const TaskFamily*> TaskFamilies() {
  return {&families::Arithmetic(), &families::FileSum(), &families::FindLine(),
          &families::LookupChain(), &families::Inventory()};
}

const TaskFamily* FindTaskFamily(const std::string& name) {
  for (const TaskFamily* family : TaskFamilies()) {
    if (name == family->name()) return family;
  }
  return nullptr;
}

namespace families {
std::string TaskId(const char* family, uint64_t seed, int difficulty) {
  return std::string(family) + "-" + std::to_string(seed) + "-d" + std::to_string(difficulty);
}
}  // namespace families

}  // namespace flashroll
