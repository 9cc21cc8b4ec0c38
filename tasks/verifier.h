// TaskCheck and Verify: how a task's outcome is judged. Four kinds:
//   exact   the final answer (or answer_file's contents), trimmed, equals
//           `answer`; integers compare exactly by value ("42" == "+042" ==
//           "42.0", 527359036330561 != 527359036329561); other numbers
//           compare within `tolerance` (relative) only when the task
//           declares one, else as text;
//   regex   the trimmed answer matches `pattern` whole (ECMAScript);
//   python  `script` runs in the task's sandbox as `python3 -I` with the
//           answer on stdin: exit 0 is success (isolated mode, so modules the
//           agent left in the working directory are not imported);
//   tests   `test_command` runs once per test id (the id appended, shell-
//           quoted) in the sandbox: every fail_to_pass and every
//           pass_to_pass test must exit 0. Before any runs, a module in the
//           working directory named like one the image's Python provides
//           (a unittest.py, pytest.py or a package of that name, in any
//           directory that is not itself inside a package) fails the check:
//           on the import path it would stand in for the real runner.
// The verdict is the checks' exit status, never their output: a line
// "PASSED" or "OK" that the agent's code prints counts for nothing.
// Checks that run code run in a sandbox, never on the host: the episode
// hands Verify the workspace of Workspace::ForVerification, where no process
// of the agent's runs. The check's own files (`files`: tests, runner
// scripts, expected outputs) live in the task's verifier record, never in
// the agent's working directory: they are written over the agent's copy
// only now, as are the python kind's script and the answer it reads.
//
// Thread safety: plain values and functions; the Workspace is the caller's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tasks/workspace.h"

namespace flashroll {

struct TaskFile {
  std::string path;  // relative to the working directory
  std::string contents;
};

struct TaskCheck {
  std::string kind = "exact";        // exact | regex | python | tests
  std::optional<double> tolerance;   // exact: relative, for non-integer numbers
  std::string pattern;               // regex
  std::string script;                // python
  std::string test_command;          // tests
  std::vector<std::string> fail_to_pass, pass_to_pass;
  // python and tests: written into the working directory just before the
  // check runs, over whatever the agent left at those paths.
  std::vector<TaskFile> files;
};

// The kinds Verify knows; a TaskCheck of another kind fails every outcome.
bool IsCheckKind(const std::string& kind);

struct Verdict {
  bool success = false;
  std::string reason;  // why it failed, for logs and the trajectory record
  // The check could not be set up or run before any artifact of the agent's
  // ran (its files could not be written, the workspace failed): no outcome
  // of the agent's (rollout/failure_kind.h, verifier_crash).
  bool machinery_failed = false;
};

// Judges `got` (the final answer or answer file's contents) against
// `expected` under `check`, running code through `workspace` when the kind
// needs it.
Verdict Verify(const TaskCheck& check, const std::string& expected, const std::string& got, Workspace& workspace);

// The exact kind's comparison, alone.
bool SameAnswer(const std::string& got, const std::string& expected, std::optional<double> tolerance);

}  // namespace flashroll
