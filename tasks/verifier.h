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
//           pass_to_pass test must exit 0.
// Checks that run code run in the same sandbox as the agent, never on the
// host.
//
// Thread safety: plain values and functions; the Workspace is the caller's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tasks/workspace.h"

namespace flashroll {

struct TaskCheck {
  std::string kind = "exact";        // exact | regex | python | tests
  std::optional<double> tolerance;   // exact: relative, for non-integer numbers
  std::string pattern;               // regex
  std::string script;                // python
  std::string test_command;          // tests
  std::vector<std::string> fail_to_pass, pass_to_pass;
};

// The kinds Verify knows; a TaskCheck of another kind fails every outcome.
bool IsCheckKind(const std::string& kind);

struct Verdict {
  bool success = false;
  std::string reason;  // why it failed, for logs and the trajectory record
};

// Judges `got` (the final answer or answer file's contents) against
// `expected` under `check`, running code through `workspace` when the kind
// needs it.
Verdict Verify(const TaskCheck& check, const std::string& expected, const std::string& got, Workspace& workspace);

// The exact kind's comparison, alone.
bool SameAnswer(const std::string& got, const std::string& expected, std::optional<double> tolerance);

}  // namespace flashroll
