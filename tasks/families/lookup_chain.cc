// Follow a chain of files, each naming the next, to a final code: needs two
// or more tool calls because each file's name is only known from the last.
#include <string>
#include <vector>

#include "tasks/families/families.h"
#include "tasks/rng.h"

namespace flashroll::families {
namespace {

class LookupChainFamily : public TaskFamily {
 public:
  const char* name() const override { return "lookup_chain"; }
  const char* summary() const override { return "follow files that name each other to a final code (2-5 tool calls)"; }

  Task Generate(uint64_t seed, int difficulty) const override {
    TaskRng rng(seed * 32452843 + static_cast<uint64_t>(difficulty));
    const int hops = 1 + static_cast<int>(rng.Int(1, 1 + difficulty / 2));
    const int decoys = difficulty + 1;
    std::vector<std::string> names;
    while (static_cast<int>(names.size()) < hops + decoys) {
      std::string n = "data/f" + std::to_string(rng.Int(10, 99)) + ".txt";
      bool dup = false;
      for (const auto& e : names) dup = dup || e == n;
      if (!dup) names.push_back(n);
    }
    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    const std::string code = std::to_string(rng.Int(1000, 9999));
    task.files.push_back({"data/start.txt", "next: " + names[0] + "\n"});
    for (int i = 0; i < hops; ++i) {
      const bool last = i == hops - 1;
      task.files.push_back({names[static_cast<size_t>(i)],
                            last ? "code: " + code + "\n" : "next: " + names[static_cast<size_t>(i) + 1] + "\n"});
    }
    for (int i = hops; i < hops + decoys; ++i) {
      task.files.push_back({names[static_cast<size_t>(i)], "code: " + std::to_string(rng.Int(1000, 9999)) + "\n"});
    }
    task.prompt = "Start at data/start.txt. Each file either names the next file (next: PATH) or holds a code "
                  "(code: N). Follow the chain and give the code as your final answer.";
    task.answer = code;
    return task;
  }

  SolutionStep NextStep(const Task&, const std::vector<std::string>& outputs) const override {
    if (outputs.empty()) return {"I read the start file to find where the chain goes.", "cat data/start.txt"};
    const std::string& last = outputs.back();
    if (last.rfind("next: ", 0) != 0) return {};
    const std::string next = last.substr(6, last.find_first_of(" \n", 6) - 6);
    return {"It points to " + next + ", so I read that file next.", "cat " + next};
  }

  std::string FinalAnswer(const Task&, const std::vector<std::string>& outputs) const override {
    if (outputs.empty() || outputs.back().rfind("code: ", 0) != 0) return "";
    std::string code = outputs.back().substr(6);
    while (!code.empty() && (code.back() == '\n' || code.back() == ' ')) code.pop_back();
    return code;
  }
};

}  // namespace

const TaskFamily& LookupChain() {
  static const LookupChainFamily family;
  return family;
}

}  // namespace flashroll::families
