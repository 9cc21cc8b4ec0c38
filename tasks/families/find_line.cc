// Find the line of a file that contains a given word.
#include <string>
#include <vector>

#include "tasks/families/families.h"
#include "tasks/rng.h"

namespace flashroll::families {
namespace {

const std::vector<std::string>& Words() {
  static const std::vector<std::string> words = {
      "apple", "river", "stone", "cloud", "maple", "ember", "falcon", "harbor", "lantern", "meadow",
      "nickel", "orchid", "pepper", "quartz", "raven", "saddle", "timber", "violet", "walnut", "yarrow",
      "anchor", "basil", "cedar", "dune", "fern", "garnet", "hazel", "iris", "juniper", "kettle"};
  return words;
}

class FindLineFamily : public TaskFamily {
 public:
  const char* name() const override { return "find_line"; }
  const char* summary() const override { return "find the line number of the line that contains a word"; }

  Task Generate(uint64_t seed, int difficulty) const override {
    TaskRng rng(seed * 15485863 + static_cast<uint64_t>(difficulty));
    const std::vector<std::string>& words = Words();
    const std::string target = rng.Pick(words);
    const int lines = static_cast<int>(rng.Int(4, 8 * difficulty + 6));
    const int target_line = static_cast<int>(rng.Int(1, lines));
    // Beyond the demonstrated range the word is on several lines and the task
    // asks how many: the demonstrated "grep -n" answer is then wrong.
    const bool count_task = difficulty > kDemonstrationMaxDifficulty;
    std::vector<bool> has_target(static_cast<size_t>(lines) + 1, false);
    has_target[static_cast<size_t>(target_line)] = true;
    if (count_task) {
      const int extra = static_cast<int>(rng.Int(1, difficulty - kDemonstrationMaxDifficulty + 1));
      for (int k = 0; k < extra; ++k) has_target[static_cast<size_t>(rng.Int(1, lines))] = true;
    }
    std::string contents;
    for (int i = 1; i <= lines; ++i) {
      const int n = static_cast<int>(rng.Int(3, 6));
      std::string line;
      for (int w = 0; w < n; ++w) {
        std::string word = rng.Pick(words);
        while (word == target) word = rng.Pick(words);
        line += (w ? " " : "") + word;
      }
      if (has_target[static_cast<size_t>(i)]) line += " " + target;
      contents += line + "\n";
    }
    const std::string file = rng.Pick<std::string>({"notes.txt", "log.txt", "words.txt"});
    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    task.files = {{file, contents}};
    if (count_task) {
      int matches = 0;
      for (bool b : has_target) matches += b ? 1 : 0;
      task.prompt = "How many lines of " + file + " contain the word '" + target +
                    "'? Give the count as your final answer.";
      task.answer = std::to_string(matches);
    } else {
      task.prompt = "Which line of " + file + " contains the word '" + target +
                    "'? Give the line number (counting from 1) as your final answer.";
      task.answer = std::to_string(target_line);
    }
    return task;
  }

  SolutionStep NextStep(const Task& task, const std::vector<std::string>& outputs) const override {
    if (!outputs.empty()) return {};
    const std::string& file = task.files.front().path;
    const size_t open = task.prompt.find('\'');
    const std::string word = task.prompt.substr(open + 1, task.prompt.find('\'', open + 1) - open - 1);
    if (IsCountTask(task)) return {"grep -c counts the lines that match.", "grep -c -w '" + word + "' " + file};
    return {"grep -n prints matching lines with their numbers.", "grep -n -w '" + word + "' " + file};
  }

  std::string FinalAnswer(const Task& task, const std::vector<std::string>& outputs) const override {
    if (outputs.empty()) return "";
    if (IsCountTask(task)) return outputs.back();
    return outputs.back().substr(0, outputs.back().find(':'));
  }

 private:
  static bool IsCountTask(const Task& task) { return task.prompt.rfind("How many lines", 0) == 0; }
};

}  // namespace

const TaskFamily& FindLine() {
  static const FindLineFamily family;
  return family;
}

}  // namespace flashroll::families
