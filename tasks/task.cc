#include "tasks/task.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "common/strings.h"
#include "tasks/families/families.h"

namespace flashroll {
namespace {

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

// Integers compare exactly, digit for digit (a relative tolerance would accept
// 527359036330561 for 527359036329561); other numbers compare within a
// relative 1e-9, so "0.3" matches 0.1 + 0.2 printed in full.
bool SameAnswer(const std::string& got, const std::string& expected) {
  const std::string a(TrimWhitespace(got)), b(TrimWhitespace(expected));
  if (a == b) return true;
  const std::optional<std::string> ia = AsInteger(a), ib = AsInteger(b);
  if (ia || ib) return ia && ib && *ia == *ib;
  double x = 0, y = 0;
  return AsNumber(a, &x) && AsNumber(b, &y) && std::fabs(x - y) <= 1e-9 * std::max(1.0, std::fabs(y));
}

}  // namespace

Verdict VerifyTask(const Task& task, const std::string& final_answer, Workspace& workspace) {
  std::string got = final_answer;
  if (!task.answer_file.empty()) {
    auto contents = workspace.ReadFile(task.answer_file);
    if (!contents.ok()) return {false, task.answer_file + " was not written"};
    got = *contents;
  }
  if (SameAnswer(got, task.answer)) return {true, ""};
  std::string shown(TrimWhitespace(got));
  if (shown.size() > 80) shown = shown.substr(0, 80) + "...";
  return {false, "expected '" + task.answer + "', got '" + shown + "'"};
}

Status PrepareWorkspace(const Task& task, Workspace& workspace) {
  for (const TaskFile& file : task.files) {
    FR_RETURN_IF_ERROR(workspace.WriteFile(file.path, file.contents).Wrap("task " + task.id));
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
