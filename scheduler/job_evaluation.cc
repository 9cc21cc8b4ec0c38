#include "scheduler/job_evaluation.h"

#include <cstdio>
#include <string>
#include <vector>

#include "rollout/evaluation.h"
#include "tasks/instance.h"

namespace flashroll {
namespace {

std::vector<double> Temperatures(const JobConfig& config) {
  if (!config.training.eval_temperatures.empty()) return config.training.eval_temperatures;
  if (config.rollout.temperature == 1.0) return {1.0};
  return {config.rollout.temperature, 1.0};
}

// One set at every temperature: the first's report, the others' beside it.
Result<nlohmann::json> EvaluateSet(const JobConfig& config, EvalOptions options, Policy& policy,
                                   const engine::Tokenizer& tokenizer, sandbox::Manager& manager) {
  nlohmann::json out;
  for (double temperature : Temperatures(config)) {
    options.temperature = temperature;
    FR_ASSIGN_OR_RETURN(EvalReport report, Evaluate(policy, tokenizer, manager, options, nullptr));
    if (out.is_null()) {
      out = report.ToJson();
      out["temperature"] = temperature;
    } else {
      out[EvalTemperatureKey(temperature)] = report.ToJson();
    }
  }
  return out;
}

// The held-out set's tasks per effort: test_tasks, else eval_tasks; 0 without a test set.
int64_t TestTasks(const JobConfig& config) {
  if (!config.training.test_seed) return 0;
  return config.training.test_tasks.value_or(config.training.eval_tasks);
}

}  // namespace

std::string EvalTemperatureKey(double temperature) {
  char text[48];
  std::snprintf(text, sizeof(text), "at_temperature_%g", temperature);
  return text;
}

int64_t JobEvaluationEpisodes(const JobConfig& config) {
  return static_cast<int64_t>(Temperatures(config).size()) * (config.training.eval_tasks + TestTasks(config)) *
         static_cast<int64_t>(config.rollout.efforts.size());
}

Result<nlohmann::json> RunJobEvaluation(const JobConfig& config, const Scaffold& scaffold,
                                        const sandbox::SandboxSpec& spec, Policy& policy,
                                        const engine::Tokenizer& tokenizer, sandbox::Manager& manager) {
  EvalOptions eval;
  for (const std::string& family : config.tasks.families) eval.families.push_back(FindTaskFamily(family));
  eval.scaffolds = {&scaffold};
  eval.efforts.assign(config.rollout.efforts.begin(), config.rollout.efforts.end());
  eval.episodes_per_cell = static_cast<int>(config.training.eval_tasks);
  eval.min_difficulty = static_cast<int>(config.tasks.min_difficulty);
  eval.max_difficulty = static_cast<int>(config.tasks.max_difficulty);
  eval.purpose = tasks::Purpose::kEval;
  eval.seed = config.training.eval_seed;
  eval.max_turns = static_cast<int>(config.rollout.max_turns);
  eval.max_tokens = config.rollout.max_tokens;
  eval.threads = static_cast<int>(config.scheduler.max_in_flight);
  eval.sandbox = spec;
  FR_ASSIGN_OR_RETURN(nlohmann::json out, EvaluateSet(config, eval, policy, tokenizer, manager));
  if (config.training.test_seed) {
    eval.purpose = tasks::Purpose::kTest;
    eval.seed = *config.training.test_seed;
    eval.episodes_per_cell = static_cast<int>(TestTasks(config));
    FR_ASSIGN_OR_RETURN(out["test"], EvaluateSet(config, eval, policy, tokenizer, manager));
  }
  return out;
}

}  // namespace flashroll
