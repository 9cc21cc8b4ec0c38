// Task and TaskFamily: what an agent is asked to do, and how it is checked.
//
// A Task is a problem statement plus the files its working directory starts
// with and the expected answer. A TaskFamily generates fresh instances from a
// seed at a difficulty, writes a reference solution (the tool calls an expert
// would make; used to synthesise demonstrations) and verifies an outcome
// programmatically. Families are registered in one table (FindTaskFamily);
// nothing switches on a family's name.
//
// Thread safety: families are stateless and may be shared across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tasks/verifier.h"
#include "tasks/workspace.h"

namespace flashroll {

// Difficulties 1-5 are the range the default models saw in demonstrations;
// 6-10 grow the same tasks further (longer expressions, longer chains), where
// a trained model starts to fail and RL finds signal in both directions.
constexpr int kMaxDifficulty = 10;
constexpr int kDemonstrationMaxDifficulty = 5;

// The sandbox a task asks for, over the job's: a built-in image by name
// (never a host path), limits and network. Unset fields keep the job's.
struct TaskEnvironment {
  std::string image;                     // "host" or "busybox"; empty: the job's
  std::optional<uint64_t> memory_bytes;
  std::optional<int64_t> pids;
  std::optional<double> cpus;
  std::string net;                       // "none" or "policy"; empty: the job's
  std::vector<std::string> allow;        // with net policy: IP[/N]:PORT rules
  std::optional<uint64_t> disk_bytes;    // the writable root, on disk (sandbox/disk.h)
  // Who the agent's commands run as (names or numbers in the image's
  // /etc/passwd and /etc/group); both empty: the job's, else the image's.
  // A user or a group given alone replaces the whole pair.
  std::string user;
  std::string group;
};

// What a task file may ask of the job's sandboxes at most (a job's
// `sandbox.max`): a task file is input the job's owner may not have
// written, and without ceilings one task could ask for a million pids or
// every CPU of the machine. The defaults are the node API's maxima
// (sandbox/api/policy.h). Checked by
// TaskSandboxSpec (rollout/sandbox_workspace.h).
struct TaskCeilings {
  uint64_t memory_bytes = uint64_t{4} << 30;
  uint64_t disk_bytes = uint64_t{4} << 30;
  int64_t pids = 4096;
  double cpus = 4.0;
  size_t allow_rules = 64;  // egress rules (environment.allow)
};

struct Task {
  std::string family;       // a registered family, or "file" for a task read from a task file
  std::string id;           // "<family>-<seed>", names this instance everywhere
  int difficulty = 1;       // 1 (easiest) .. kMaxDifficulty
  std::string prompt;       // the user's message
  std::vector<TaskFile> files;     // the agent sees and may change these
  std::vector<std::string> setup;  // shell commands run in the sandbox before the agent starts
  std::string answer;       // the expected final answer or file contents (exact)
  std::string answer_file;  // when set, the answer is read from this file, not the final message
  TaskCheck check;          // how the outcome is judged (verifier.h); exact by default
  TaskEnvironment environment;
};

// One step of a reference solution: what the expert thinks, then runs.
struct SolutionStep {
  std::string thought;
  std::string command;  // a bash command line
};

class TaskFamily {
 public:
  virtual ~TaskFamily() = default;
  virtual const char* name() const = 0;
  // A one-line description for --help and docs.
  virtual const char* summary() const = 0;
  // A fresh instance; the same (seed, difficulty) always gives the same task.
  virtual Task Generate(uint64_t seed, int difficulty) const = 0;
  // The tool calls that solve `task`, in order. Each step after the first may
  // depend on earlier outputs, so a step is produced from those outputs.
  // Returns an empty command when the solution is complete.
  virtual SolutionStep NextStep(const Task& task, const std::vector<std::string>& outputs) const = 0;
  // The final answer an expert gives after the steps, from their outputs.
  virtual std::string FinalAnswer(const Task& task, const std::vector<std::string>& outputs) const = 0;
};

// Whether judging `task` reads its workspace (an answer file, or a check
// that runs code); when not, the final message alone decides.
bool VerdictReadsWorkspace(const Task& task);

// Checks an outcome: the final answer (or the task's answer_file read from
// `workspace`) under the task's check (verifier.h).
Verdict VerifyTask(const Task& task, const std::string& final_answer, Workspace& workspace);

// Writes the task's starting files into `workspace`, then runs its setup
// commands there; a command that fails is an error naming it.
Status PrepareWorkspace(const Task& task, Workspace& workspace);

// The registered families; nullptr for an unknown name.
const TaskFamily* FindTaskFamily(const std::string& name);
std::vector<const TaskFamily*> TaskFamilies();

}  // namespace flashroll
