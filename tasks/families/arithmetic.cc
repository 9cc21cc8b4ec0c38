// Multi-step integer arithmetic, solved by running Python.
#include <string>

#include "tasks/families/families.h"
#include "tasks/rng.h"

namespace flashroll::families {
namespace {

// Builds a random expression and its exact value; integer division and
// modulo follow Python's floor semantics, which the verifier relies on.
struct Expr {
  std::string text;
  long long value;
};

constexpr long long kMaxMagnitude = 1'000'000'000'000'000LL;

long long FloorDiv(long long a, long long b) {
  long long q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Expr Build(TaskRng& rng, int ops, long long max_operand) {
  Expr e{std::to_string(rng.Int(2, max_operand)), 0};
  e.value = std::stoll(e.text);
  for (int i = 0; i < ops; ++i) {
    const long long operand = rng.Int(2, max_operand);
    switch (rng.Int(0, 4)) {
      case 0:
        e = {e.text + " + " + std::to_string(operand), e.value + operand};
        break;
      case 1:
        e = {e.text + " - " + std::to_string(operand), e.value - operand};
        break;
      case 2:
        // Keeps every intermediate far inside int64 so the C++ value equals Python's.
        if (e.value > kMaxMagnitude / operand || e.value < -kMaxMagnitude / operand) {
          e = {e.text + " - " + std::to_string(operand), e.value - operand};
        } else {
          e = {"(" + e.text + ") * " + std::to_string(operand), e.value * operand};
        }
        break;
      case 3:
        e = {"(" + e.text + ") // " + std::to_string(operand), FloorDiv(e.value, operand)};
        break;
      default: {
        const long long m = e.value % operand;
        e = {"(" + e.text + ") % " + std::to_string(operand), m < 0 ? m + operand : m};
      }
    }
  }
  return e;
}

constexpr const char* kPromptHead = "Compute the exact value of the Python expression ";
constexpr const char* kPromptTail = " and give the result as your final answer.";

// The expression is the prompt between its fixed head and tail.
std::string Expression(const Task& task) {
  const std::string head = kPromptHead, tail = kPromptTail;
  return task.prompt.substr(head.size(), task.prompt.size() - head.size() - tail.size());
}

class ArithmeticFamily : public TaskFamily {
 public:
  const char* name() const override { return "arithmetic"; }
  const char* summary() const override { return "multi-step integer arithmetic, solved by running Python"; }

  Task Generate(uint64_t seed, int difficulty) const override {
    TaskRng rng(seed * 7919 + static_cast<uint64_t>(difficulty));
    const int ops = 1 + difficulty + static_cast<int>(rng.Int(0, difficulty));
    const long long max_operand = difficulty <= 2 ? 99 : 9999;
    Expr e = Build(rng, ops, max_operand);
    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    task.prompt = kPromptHead + e.text + kPromptTail;
    task.answer = std::to_string(e.value);
    return task;
  }

  SolutionStep NextStep(const Task& task, const std::vector<std::string>& outputs) const override {
    if (!outputs.empty()) return {};
    return {"I will let Python evaluate the expression exactly instead of doing it by hand.",
            "python3 -c \"print(" + Expression(task) + ")\""};
  }

  std::string FinalAnswer(const Task&, const std::vector<std::string>& outputs) const override {
    return outputs.empty() ? "" : outputs.back();
  }
};

}  // namespace

const TaskFamily& Arithmetic() {
  static const ArithmeticFamily family;
  return family;
}

}  // namespace flashroll::families
