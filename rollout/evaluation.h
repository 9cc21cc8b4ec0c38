// Evaluation: runs a model as an agent on fresh task instances across
// scaffolds and reasoning efforts, each episode in its own sandbox, and
// reports tool-call format validity, task success and reasoning length.
// Every (scaffold, effort) cell runs the same tasks, instances 0..n-1 of
// the set (purpose, seed) names (tasks/instance.h), with the same sampling
// seeds, so cells differ only in what they vary, not in difficulty.
//
// Thread safety: Evaluate runs episodes on `threads` worker threads; the
// Policy, Tokenizer and Manager are shared (all three allow it); the
// engine behind an EnginePolicy batches the episodes' turns.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/progress.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/episode.h"
#include "rollout/policy.h"
#include "rollout/scaffold.h"
#include "sandbox/sandbox.h"
#include "tasks/instance.h"
#include "tasks/task.h"

namespace flashroll {

struct EvalOptions {
  std::vector<const TaskFamily*> families;
  std::vector<const Scaffold*> scaffolds;
  std::vector<int> efforts = {1, 50, 100};
  int episodes_per_cell = 4;  // per (scaffold, effort): the set's first tasks
  int min_difficulty = 1;     // task difficulties are drawn uniformly from this range
  int max_difficulty = kMaxDifficulty;
  double temperature = 0.7;
  tasks::Purpose purpose = tasks::Purpose::kEval;
  int64_t seed = 1000;        // in [0, tasks::kMaxSetSeed]
  int max_turns = 8;
  int64_t max_tokens = EpisodeOptions().max_tokens;  // per episode, prompt included
  int threads = 2;
  sandbox::SandboxSpec sandbox;
};

struct EvalCounts {
  int episodes = 0;
  int successes = 0;
  int turns = 0;
  int valid_turns = 0;
  int64_t reasoning_tokens = 0;  // over all turns of all episodes
  double reasoning_tokens_sq = 0;  // sum over episodes of (the episode's reasoning tokens)^2, for a spread
};

// One episode's outcome. `index` names the episode within the options: the
// same options and seed give the same task and sampling seed for an index,
// so two evaluations of one model before and after training pair up.
struct EvalEpisode {
  size_t index = 0;
  size_t task = 0;  // the task's index in the set: equal across the cells
  int effort = 0;
  bool success = false;
  int64_t reasoning_tokens = 0;
};

struct EvalReport {
  std::map<std::string, EvalCounts> by_scaffold;
  std::map<std::string, EvalCounts> by_family;
  std::map<int, EvalCounts> by_effort;
  std::map<int, EvalCounts> by_difficulty;
  EvalCounts total;
  std::vector<std::string> failures;  // why a few episodes failed, for a human to read
  // Episodes whose environment broke (failure_kind.h), by kind: they say
  // nothing of the model, so they are in no count above and not in
  // `episodes` (a paired comparison skips their index).
  std::map<std::string, int> failure_kinds;
  std::vector<EvalEpisode> episodes;   // every episode that ran to an outcome of the agent's, by index

  nlohmann::json ToJson() const;
  std::string ToText() const;
};

Result<EvalReport> Evaluate(Policy& policy, const engine::Tokenizer& tokenizer,
                            sandbox::Manager& manager, const EvalOptions& options, Progress* progress);

}  // namespace flashroll
