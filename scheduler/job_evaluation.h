// The RL job's fixed evaluation (training.eval_tasks, docs/DESIGN.md): the
// same tasks at every effort (rollout/evaluation.h), under the job's own
// token and turn budgets and scaffold, at the sampling temperature and, when
// that is not 1.0, at T = 1.0 too (a trained policy that only learnt a lower
// temperature shows it there); on the tuning set (training.eval_seed) and,
// with training.test_seed, on the held-out test set (training.test_tasks tasks
// per effort, else eval_tasks). training.eval_temperatures
// replaces the temperatures (e.g. [1.0, 0.7, 0]: the controls of `make
// run-controls`; 0 is greedy).
//
// The result is the tuning set's EvalReport JSON at the first temperature
// (the sampling temperature unless eval_temperatures says otherwise: what
// "before" and "after" always held), plus
//   "temperature":       that temperature
//   "at_temperature_T":  the same set's report at each other temperature T
//                        (EvalTemperatureKey: "at_temperature_1" for 1.0,
//                        absent when the sampling temperature is 1.0 and no
//                        eval_temperatures are given)
//   "test":              the test set's, with its own "at_temperature_T"
//                        (only with training.test_seed)
//
// Thread safety: as Evaluate.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/policy.h"
#include "rollout/scaffold.h"
#include "sandbox/sandbox.h"
#include "scheduler/job_config.h"

namespace flashroll {

// "at_temperature_" + T printed as %g: "at_temperature_1", "at_temperature_0.7".
std::string EvalTemperatureKey(double temperature);

// The episodes one evaluation runs, over all its sets and temperatures.
int64_t JobEvaluationEpisodes(const JobConfig& config);

Result<nlohmann::json> RunJobEvaluation(const JobConfig& config, const Scaffold& scaffold,
                                        const sandbox::SandboxSpec& spec, Policy& policy,
                                        const engine::Tokenizer& tokenizer, sandbox::Manager& manager);

}  // namespace flashroll
