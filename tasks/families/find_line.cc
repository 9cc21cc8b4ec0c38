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
    std::string contents;
    for (int i = 1; i <= lines; ++i) {
      const int n = static_cast<int>(rng.Int(3, 6));
      std::string line;
      for (int w = 0; w < n; ++w) {
        std::string word = rng.Pick(words);
        while (word == target) word = rng.Pick(words);
        line += (w ? " " : "") + word;
      }
      if (i == target_line) line += " " + target;
      contents += line + "\n";
    }
    const std::string file = rng.Pick<std::string>({"notes.txt", "log.txt", "words.txt"});
    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    task.prompt = "Which line of " + file + " contains the word '" + target +
                  "'? Give the line number (counting from 1) as your final answer.";
    task.files = {{file, contents}};
    task.answer = std::to_string(target_line);
    return task;
  }

  SolutionStep NextStep(const Task& task, const std::vector<std::string>& outputs) const override {
    if (!outputs.empty()) return {};
    const std::string& file = task.files.front().path;
    const size_t open = task.prompt.find('\'');
    const std::string word = task.prompt.substr(open + 1, task.prompt.find('\'', open + 1) - open - 1);
    return {"grep -n prints matching lines with their numbers.", "grep -n -w '" + word + "' " + file};
  }

  std::string FinalAnswer(const Task&, const std::vector<std::string>& outputs) const override {
    if (outputs.empty()) return "";
    return outputs.back().substr(0, outputs.back().find(':'));
  }
};

}  // namespace

const TaskFamily& FindLine() {
  static const FindLineFamily family;
  return family;
}

}  // namespace flashroll::families
