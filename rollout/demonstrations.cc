#include "rollout/demonstrations.h"

#include <algorithm>

#include "tasks/reference_solver.h"
#include "tasks/rng.h"
#include "tasks/workspace.h"

namespace flashroll {
namespace {

// General-purpose reasoning sentences; which ones appear, and how many,
// depends on the seed and the effort.
const std::vector<std::string>& PlanningSentences() {
  static const std::vector<std::string> s = {
      "I should use the tool rather than guess, because the answer must be exact.",
      "One command at a time keeps mistakes easy to spot.",
      "The files are in the working directory, so relative paths work.",
      "If the output looks wrong I will check the input again.",
      "I need to be careful with quoting in the shell.",
      "Negative numbers and large values must be handled exactly.",
      "After this step I will look at the output before answering.",
      "The final answer goes inside the answer tags.",
      "A small, simple command is less likely to fail than a clever one.",
      "I will not assume anything about the data that I have not seen.",
      "The task is fully specified, so I can start right away.",
      "Checking the intermediate result costs little and prevents errors.",
      "If the command fails, the error message will tell me what to fix.",
      "I want the answer in the exact form the task asks for.",
      "Standard tools like cat, grep, awk and python3 are enough here.",
      "There is no need to modify any input files.",
  };
  return s;
}

const std::vector<std::string>& CheckingSentences() {
  static const std::vector<std::string> s = {
      "That is consistent with the task.",
      "The command ran without errors.",
      "I double-check that this answers the question that was asked.",
      "Nothing in the output suggests a mistake.",
      "The value has the form the task asks for.",
      "I do not need any more commands.",
  };
  return s;
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > 60) line = line.substr(0, 60) + "...";
  return line;
}

// Appends `count` distinct sentences from `pool` in a seed-dependent order.
void AddSentences(TaskRng& rng, const std::vector<std::string>& pool, int count, std::string* out) {
  std::vector<size_t> order(pool.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(i) - 1))]);
  for (int i = 0; i < count && i < static_cast<int>(order.size()); ++i) {
    *out += (out->empty() ? "" : " ") + pool[order[static_cast<size_t>(i)]];
  }
}

// Restates what is asked: the prompt's question when it has one (it names
// what later steps need, such as the item and the warehouse), else its first
// sentence.
std::string Goal(const Task& task) {
  const std::string& p = task.prompt;
  const size_t question = p.find('?');
  if (question != std::string::npos) {
    const size_t start = p.rfind(". ", question);
    return "The task: " + p.substr(start == std::string::npos ? 0 : start + 2,
                                   question + 1 - (start == std::string::npos ? 0 : start + 2));
  }
  std::string first = p.substr(0, p.find(". ") == std::string::npos ? p.size() : p.find(". "));
  if (!first.empty() && first.back() == '.') first.pop_back();
  return "The task: " + first + ".";
}

}  // namespace

Result<Demonstration> SynthesizeDemonstration(const TaskFamily& family, const Task& task,
                                              const Scaffold& scaffold, int effort, uint64_t seed) {
  if (effort < 1 || effort > 100) {
    return Status::InvalidArgument("effort " + std::to_string(effort) + " is outside [1, 100]");
  }
  FR_ASSIGN_OR_RETURN(std::unique_ptr<LocalWorkspace> workspace, LocalWorkspace::Create());
  FR_ASSIGN_OR_RETURN(ReferenceRun run, RunReferenceSolution(family, task, *workspace));

  TaskRng rng(seed ^ 0x5DEECE66Dull);
  // How many sentences scatters around the effort's mean (0 at least), so
  // that at every effort the model learns a spread of reasoning lengths. A
  // policy whose length is a fixed function of the effort leaves the
  // effort-conditioned length reward nothing to choose between: with exact
  // counts, effort 1 sat at its floor and no RL run shortened it
  // (docs/BENCHMARKS.md, "The closed loop").
  auto scattered = [&rng](int mean, int spread) {
    return std::max(0, mean + static_cast<int>(rng.Int(-spread, spread)));
  };
  const int first_sentences = scattered(12 * effort / 100, 2);
  const int later_mean = 4 * effort / 100;

  Demonstration demo;
  demo.task_id = task.id;
  demo.family = task.family;
  demo.difficulty = task.difficulty;
  demo.effort = effort;
  demo.scaffold = scaffold.name();
  demo.success = run.verdict.success;
  demo.messages.push_back({"system", scaffold.SystemPrompt(effort)});
  demo.messages.push_back({"user", task.prompt});

  for (size_t i = 0; i < run.steps.size(); ++i) {
    const ReferenceStep& step = run.steps[i];
    std::string reasoning;
    if (i == 0) {
      reasoning = Goal(task);
      AddSentences(rng, PlanningSentences(), first_sentences, &reasoning);
    } else {
      reasoning = "The output was: " + FirstLine(run.steps[i - 1].result.stdout_text) + ".";
      AddSentences(rng, CheckingSentences(), scattered(later_mean, 1), &reasoning);
    }
    reasoning += " " + step.step.thought;
    demo.reasoning_chars += reasoning.size();
    demo.messages.push_back({"assistant", scaffold.RenderToolCall(reasoning, step.step.command)});
    demo.messages.push_back({"tool", Scaffold::RenderToolResult(step.result)});
  }
  std::string reasoning = run.steps.empty()
                              ? Goal(task)
                              : "The output was: " + FirstLine(run.steps.back().result.stdout_text) + ".";
  AddSentences(rng, CheckingSentences(), scattered(later_mean, 1), &reasoning);
  reasoning += " The answer is " + run.final_answer + ".";
  demo.reasoning_chars += reasoning.size();
  demo.messages.push_back({"assistant", scaffold.RenderAnswer(reasoning, run.final_answer)});
  return demo;
}

nlohmann::json DemonstrationToJson(const Demonstration& demo) {
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : demo.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  return {{"task_id", demo.task_id},     {"family", demo.family},     {"difficulty", demo.difficulty},
          {"effort", demo.effort},       {"scaffold", demo.scaffold}, {"success", demo.success},
          {"reasoning_chars", demo.reasoning_chars}, {"messages", messages}};
}

}  // namespace flashroll
