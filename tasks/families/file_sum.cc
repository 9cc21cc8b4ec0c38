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
    if (difficulty > kDemonstrationMaxDifficulty) return GenerateCsv(seed, difficulty);
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
    const bool csv = file.size() > 4 && file.compare(file.size() - 4, 4, ".csv") == 0;
    if (csv) {
      if (outputs.empty()) return {"I look at the first lines of " + file + " to see its columns.", "head -3 " + file};
      if (outputs.size() == 1) {
        return {"The first line is a header and the values are the second comma-separated column.",
                "awk -F, 'NR > 1 {s += $2} END {print s}' " + file + " > answer.txt && cat answer.txt"};
      }
      return {};
    }
    if (outputs.empty()) {
      return {"First I look at " + file + " to see the numbers.", "cat " + file};
    }
    if (outputs.size() == 1) {
      return {"awk can add one column exactly; I write the total to answer.txt and show it.",
              "awk '{s += $1} END {print s}' " + file + " > answer.txt && cat answer.txt"};
    }
    return {};
  }

  // Beyond the demonstrated range: a CSV with a header, whose second column is
  // summed — the demonstrated one-column awk gives a wrong total here.
  Task GenerateCsv(uint64_t seed, int difficulty) const {
    TaskRng rng(seed * 104729 + static_cast<uint64_t>(difficulty));
    const int count = static_cast<int>(rng.Int(3, 6 * (difficulty - kDemonstrationMaxDifficulty) + 4));
    const std::string file = rng.Pick<std::string>({"sales.csv", "items.csv", "orders.csv"});
    std::string contents = "item,value\n";
    long long sum = 0;
    for (int i = 0; i < count; ++i) {
      const long long v = rng.Int(-500, 9999);
      sum += v;
      contents += "item" + std::to_string(rng.Int(100, 999)) + "," + std::to_string(v) + "\n";
    }
    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    task.prompt = "The file " + file + " has a header line and rows of item,value. Add up the value column and "
                  "write the total to answer.txt.";
    task.files = {{file, contents}};
    task.answer = std::to_string(sum);
    task.answer_file = "answer.txt";
    return task;
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
