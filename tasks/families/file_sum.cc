// Sum the numbers in a file and write the result to another file.
#include <string>

#include "tasks/families/families.h"
#include "tasks/rng.h"

namespace flashroll::families {
namespace {

class FileSumFamily : public TaskFamily {
 public:
  const char* name() const override { return "file_sum"; }
  const char* summary() const override { return "sum the numbers in a file and write the total to answer.txt"; }

  Task Generate(uint64_t seed, int difficulty) const override {
    TaskRng rng(seed * 104729 + static_cast<uint64_t>(difficulty));
    const int count = static_cast<int>(rng.Int(3, 6 * difficulty + 4));
    const bool negatives = difficulty >= 3;
    const std::string file = rng.Pick<std::string>({"numbers.txt", "values.txt", "data.txt", "input.txt"});
    std::string contents;
    long long sum = 0;
    for (int i = 0; i < count; ++i) {
      long long v = rng.Int(negatives ? -500 : 0, difficulty >= 2 ? 9999 : 99);
      sum += v;
      contents += std::to_string(v) + "\n";
    }
    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    task.prompt = "The file " + file + " has one integer per line. Add them up and write the total to answer.txt.";
    task.files = {{file, contents}};
    task.answer = std::to_string(sum);
    task.answer_file = "answer.txt";
    return task;
  }

  SolutionStep NextStep(const Task& task, const std::vector<std::string>& outputs) const override {
    const std::string& file = task.files.front().path;
    if (outputs.empty()) {
      return {"First I look at " + file + " to see the numbers.", "cat " + file};
    }
    if (outputs.size() == 1) {
      return {"awk can add one column exactly; I write the total to answer.txt and show it.",
              "awk '{s += $1} END {print s}' " + file + " > answer.txt && cat answer.txt"};
    }
    return {};
  }

  std::string FinalAnswer(const Task&, const std::vector<std::string>& outputs) const override {
    return outputs.empty() ? "" : outputs.back();
  }
};

}  // namespace

const TaskFamily& FileSum() {
  static const FileSumFamily family;
  return family;
}

}  // namespace flashroll::families
