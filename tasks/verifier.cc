#include "tasks/verifier.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string_view>

#include "common/strings.h"

namespace flashroll {
namespace {

constexpr std::chrono::seconds kCheckTimeout{60};

bool AsNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size() && std::isfinite(*out);
}

// An integer written in decimal ("42", "-7", "+042", "42.000"), as its
// canonical digits with a leading '-' when negative ("-0" is "0"); nullopt
// for anything else, exponents and hex included.
std::optional<std::string> AsInteger(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (const size_t dot = s.find('.'); dot != std::string_view::npos) {
    if (s.find_first_not_of('0', dot + 1) != std::string_view::npos) return std::nullopt;
    s = s.substr(0, dot);
  }
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  const size_t first = s.find_first_not_of('0');
  if (first == std::string_view::npos) return "0";
  return (negative ? "-" : "") + std::string(s.substr(first));
}

std::string Shown(const std::string& text) {
  std::string shown(TrimWhitespace(text));
  if (shown.size() > 80) shown = shown.substr(0, 80) + "...";
  return shown;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A check that could not be set up or run: the machinery's failure.
Verdict MachineryFailed(std::string reason) { return {false, std::move(reason), /*machinery_failed=*/true}; }

// Runs `command` in the sandbox; "" when it exited 0, else why not.
// *could_not_run is set when the workspace failed to run it at all.
std::string RunCheck(Workspace& workspace, const std::string& command, const std::string& what,
                     bool* could_not_run = nullptr) {
  auto result = workspace.Exec(command, kCheckTimeout);
  if (!result.ok()) {
    if (could_not_run != nullptr) *could_not_run = true;
    return what + ": " + result.status().ToString();
  }
  if (result->timed_out) return what + ": timed out";
  if (result->exit_code != 0) {
    return what + ": exit " + std::to_string(result->exit_code) +
           (result->stderr_text.empty() ? "" : ": " + Shown(result->stderr_text));
  }
  return "";
}

// The check's own files, over whatever the agent left at their paths.
Status WriteCheckFiles(const TaskCheck& check, Workspace& workspace) {
  for (const TaskFile& file : check.files) FR_RETURN_IF_ERROR(workspace.WriteFile(file.path, file.contents));
  return Status::Ok();
}

// Prints the working directory's modules that would shadow one of the
// image's Python (a planted unittest.py, pytest.py, ...): a NAME.py,
// NAME.pyc, NAME.*.so or NAME/ package (a directory with __init__.py) in a
// directory that is not itself inside a package (any such directory may be
// on sys.path: the working directory for `python3 -m`, a test's directory
// for pytest), where an isolated python3 (-I: the working directory is not
// on its path) finds a module NAME. Nothing without python3 in the image.
constexpr char kShadowingModules[] = R"(command -v python3 >/dev/null || exit 0
exec python3 -I -c '
import importlib.util, os
def candidates():
    for top, dirs, files in os.walk("."):
        packages = [d for d in dirs if os.path.isfile(os.path.join(top, d, "__init__.py"))]
        for d in packages:
            yield os.path.join(top, d), d
        dirs[:] = [d for d in dirs if d not in packages]
        for f in files:
            stem, dot, rest = f.partition(".")
            if rest in ("py", "pyc") or (dot and f.endswith(".so")):
                yield os.path.join(top, f), stem
for path, name in candidates():
    if name.isidentifier() and importlib.util.find_spec(name) is not None:
        print(path[2:])
')";

// The task's script reads the agent's answer as data (python3 -I: none of
// the agent's modules is imported): a workspace that cannot run it is the
// machinery's failure; what the script says of the answer is the agent's.
Verdict VerifyPython(const TaskCheck& check, const std::string& got, Workspace& workspace) {
  if (Status s = WriteCheckFiles(check, workspace); !s.ok()) return MachineryFailed(s.ToString());
  if (Status s = workspace.WriteFile(".flashroll-check.py", check.script); !s.ok()) return MachineryFailed(s.ToString());
  if (Status s = workspace.WriteFile(".flashroll-answer", got); !s.ok()) return MachineryFailed(s.ToString());
  bool could_not_run = false;
  std::string failure =
      RunCheck(workspace, "python3 -I .flashroll-check.py < .flashroll-answer", "python check", &could_not_run);
  return {failure.empty(), failure, could_not_run};
}

Verdict VerifyTests(const TaskCheck& check, Workspace& workspace) {
  if (Status s = WriteCheckFiles(check, workspace); !s.ok()) return MachineryFailed(s.ToString());
  auto shadowing = workspace.Exec(kShadowingModules, kCheckTimeout);
  if (!shadowing.ok()) return MachineryFailed("looking for planted modules: " + shadowing.status().ToString());
  if (shadowing->exit_code != 0) return {false, "looking for planted modules: exit " + std::to_string(shadowing->exit_code)};
  std::string planted(TrimWhitespace(shadowing->stdout_text));
  std::replace(planted.begin(), planted.end(), '\n', ' ');
  if (!planted.empty()) {
    return {false, "the working directory holds modules named like the image's Python's (" + Shown(planted) +
                       "): they would stand in for the real ones; the tests were not run"};
  }
  const std::pair<const char*, const std::vector<std::string>*> lists[] = {{"fail_to_pass", &check.fail_to_pass},
                                                                            {"pass_to_pass", &check.pass_to_pass}};
  for (const auto& [name, list] : lists) {
    for (const std::string& test : *list) {
      std::string failure = RunCheck(workspace, check.test_command + " " + ShellQuote(test),
                                     std::string(name) + " test " + test);
      if (!failure.empty()) return {false, failure};
    }
  }
  return {true, ""};
}

}  // namespace

bool SameAnswer(const std::string& got, const std::string& expected, std::optional<double> tolerance) {
  const std::string a(TrimWhitespace(got)), b(TrimWhitespace(expected));
  if (a == b) return true;
  const std::optional<std::string> ia = AsInteger(a), ib = AsInteger(b);
  if (ia || ib) return ia && ib && *ia == *ib;
  double x = 0, y = 0;
  return tolerance && AsNumber(a, &x) && AsNumber(b, &y) && std::fabs(x - y) <= *tolerance * std::max(1.0, std::fabs(y));
}

bool IsCheckKind(const std::string& kind) {
  return kind == "exact" || kind == "regex" || kind == "python" || kind == "tests";
}

Verdict Verify(const TaskCheck& check, const std::string& expected, const std::string& got, Workspace& workspace) {
  if (check.kind == "exact") {
    if (SameAnswer(got, expected, check.tolerance)) return {true, ""};
    return {false, "expected '" + expected + "', got '" + Shown(got) + "'"};
  }
  if (check.kind == "regex") {
    try {
      if (std::regex_match(std::string(TrimWhitespace(got)), std::regex(check.pattern, std::regex::ECMAScript))) {
        return {true, ""};
      }
      return {false, "'" + Shown(got) + "' does not match /" + check.pattern + "/"};
    } catch (const std::regex_error& e) {
      return {false, "pattern /" + check.pattern + "/: " + e.what()};
    }
  }
  if (check.kind == "python") return VerifyPython(check, got, workspace);
  if (check.kind == "tests") return VerifyTests(check, workspace);
  return {false, "unknown verifier kind '" + check.kind + "'"};
}

}  // namespace flashroll
