// JobConfig: the typed configuration of an RL or on-policy-distillation job
// (config kind `rl_job`), read from YAML such as configs/quickstart.yaml.
//
// The schema is the single description of the file: `flashroll config check`
// validates with it, and ParseJobConfig reads only validated files, so every
// error a user sees names the file, line and key. Defaults live here.
//
// Thread safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "scheduler/group_selection.h"
#include "tasks/task.h"

namespace flashroll {

struct JobConfig {
  std::string name;
  std::string store_path = "runs/job.db";

  struct Model {
    std::string path = "models/default";
    int64_t threads = 2;
    uint64_t kv_memory_bytes = 512ull << 20;
    std::string device = "cpu";  // where the embedded engine runs: cpu, cuda or cuda:N (engine/device/device.h)
    // An episode is one engine session (rollout/policy.h EnginePolicy):
    // its KV kept while tools run and across weight swaps. false: each
    // turn a new request with the whole conversation.
    bool sessions = true;
    // After a swap to version V, KV blocks written by versions older than
    // V - k are computed again before the sequence decodes further
    // (engine::EngineOptions::reprefill_older_than); -1 keeps every block.
    int64_t reprefill_older_than = -1;
  } model;

  // Where turns come from: the embedded engine over model.path (url empty),
  // or an OpenAI-compatible server (rollout/policy.h); model.path still
  // gives the tokenizer.
  struct Policy {
    std::string url;
    std::string model;         // the server's model name; required with url
    std::string api_key_file;  // optional bearer token for the server
  } policy;

  struct Tasks {
    std::vector<std::string> files;     // task files (tasks/task_file.h), all their tasks
    std::vector<std::string> families;  // and/or `count` generated tasks of these families
    int64_t count = 64;
    int64_t seed = 1;
    int64_t min_difficulty = 1;  // difficulties are drawn uniformly from [min, max]
    int64_t max_difficulty = 10;
  } tasks;

  struct Rollout {
    std::string scaffold = "bash_block";  // bash_block | json_tools | xml_tools
    int64_t max_turns = 8;
    int64_t max_tokens = 1024;            // per sample, all turns together
    double temperature = 0.7;
    std::vector<int64_t> efforts = {100};  // reasoning effort b in [1, 100]
  } rollout;

  struct Sandbox {
    std::string image = "host";
    std::string net = "none";
    uint64_t memory_bytes = 256ull << 20;
    uint64_t disk_bytes = 1ull << 30;  // the writable root, on disk (sandbox/disk.h)
    int64_t pids = 64;
    double cpus = 0.5;
    std::chrono::milliseconds exec_timeout{10000};
    bool allow_unenforced_limits = false;  // without root: run without the limits (Manager::Options)
    // Who the agent's commands run as (`user: USER[:GROUP]`); empty: the
    // image's user, else root. A task file's environment.user wins.
    std::string user;
    std::string group;
    // What a task file's environment may ask at most (`max:`); the job's
    // own values above must be within it too.
    TaskCeilings max;
  } sandbox;

  struct Scheduler {
    int64_t group_size = 8;         // G samples per (task, effort) group
    int64_t max_in_flight = 32;     // samples generating at once
    int64_t max_per_task = 16;      // samples of one task in flight
    int64_t max_staleness = 1;      // policy versions a token may lag before it is masked
    int64_t batch_groups = 4;       // groups per trainer batch
    int64_t warmup_samples = 0;     // the first N samples to finish ...
    int64_t warmup_min_tokens = 0;  // ... are dropped (and re-run) when shorter than this
    std::map<std::string, double> rate_limits;  // task family -> samples started per second
    std::chrono::milliseconds sample_timeout{0};  // 0 = no deadline
    // No sample finished, no token generated, no group consumed and no
    // weights published for this long: the job fails naming why. 0 = never.
    std::chrono::milliseconds stall_timeout{std::chrono::minutes(10)};
    // A slot whose attempt failed for the infrastructure (rollout/
    // failure_kind.h) runs again up to this many times; then it is kept as
    // failed, out of its group's statistics, and its task is quarantined.
    int64_t infra_retries = 2;
    int64_t max_samples = 0;        // stop after this many groups' samples; 0 = every task x effort x G
    bool synchronous = false;       // batch-level baseline instead of sample-level dispatch
    // Finished groups kept from the trainer because they carry no signal:
    // none | reward (rewards all equal) | verifier (verdicts all equal);
    // more groups open in their place (group_selection.h).
    std::string dynamic_sampling = "none";
    // Groups open only from (family, difficulty, effort) cells whose
    // measured pass rate lies inside the range; enabled by the key's presence.
    PassRateSelection task_selection;
  } scheduler;

  struct Rewards {
    double k0 = 0.2;        // length penalty scale at b = b_min
    double c_max = 0.5;     // cap of the length penalty
    double l_norm = 1024;   // reasoning-token normaliser
    double lambda = 0.5;    // tau = lambda * (b_max - b_min)
    std::string length_penalty = "all";     // all | success: which samples pay it (LengthRewardParams)
    std::string advantage = "grpo";         // grpo | dr_grpo
    std::string failed = "zero_advantage";  // failed samples: zero_advantage (kept) | exclude
  } rewards;

  // `training: none` runs rollouts only; otherwise the job starts a trainer
  // (a separate process, supervised by the job) that leases the finished
  // groups through the trainer API and publishes weights back.
  struct Training {
    bool enabled = false;
    std::string algorithm = "grpo";  // grpo | distill
    int64_t steps = 4;
    double learning_rate = 1e-5;
    double clip = 0.2;               // PPO clip epsilon
    // grpo: how a stale token's importance ratio r is bounded (--ratio-bound):
    // dual_clip (PPO-clip, and -A * min(r, ratio_cap)'s bound on a negative
    // advantage), truncated_is (min(r, ratio_cap) as a fixed weight on the
    // policy gradient, no PPO clip) or none (PPO-clip alone, whose loss grows
    // with r when A < 0).
    std::string ratio_bound = "dual_clip";
    double ratio_cap = 3.0;          // c of dual_clip / truncated_is (--ratio-cap)
    double kl = 0.0;                 // KL-to-reference coefficient
    double negative_weight = 1.0;    // grpo: factor on negative advantages (--negative-weight)
    // grpo: weight of the masked tokens' entropy in the loss (--entropy-weight;
    // > 0 sharpens the policy, < 0 is an exploration bonus)
    double entropy_weight = 0.0;
    double grad_clip = 1.0;
    std::string loss_agg = "token_mean";  // token_mean | dr_grpo
    // The trainer program; the job appends the trainer flags (docs/TRAINER_API.md).
    // Empty: /usr/bin/python3 -m flashroll.trainers.<algorithm>.
    std::vector<std::string> command;
    std::string checkpoint_dir;      // default: beside the store, <name>-checkpoints
    int64_t restarts = 2;            // a trainer that dies is restarted this often, then the job fails
    // distill: the teacher that scores the student's samples. Either a model
    // the job serves itself on an engine of its own (model; it must share the
    // student's tokenizer), or a `flashroll serve` already running (url, name).
    struct Teacher {
      std::string model;
      int64_t threads = 1;
      uint64_t kv_memory_bytes = 256ull << 20;
      std::string url;
      std::string name;        // the served model name; required with url
      std::string token_file;  // the url server's API key, if it wants one
    } teacher;
    // The fixed evaluation set run before the first step and after the last:
    // eval_tasks tasks of the job's families, each at every one of
    // rollout.efforts, at the sampling temperature and at 1.0; 0 = none.
    // Seeds name sets of their own purpose (tasks/instance.h), so neither
    // shares a task with tasks.seed's training set or the demonstrations.
    int64_t eval_tasks = 0;
    int64_t eval_seed = 7;
    // When set, the same evaluation also runs on this held-out set, which
    // tuning never looks at (report its numbers, tune on eval_seed's).
    std::optional<int64_t> test_seed;
    // The held-out set's tasks per effort; unset: eval_tasks. A test set
    // larger than the tuning set cuts the reported change's standard error
    // where it matters without paying for it twice.
    std::optional<int64_t> test_tasks;
    // The evaluation's temperatures, the first reported first (0: greedy).
    // Empty: the sampling temperature, and 1.0 beside it.
    std::vector<double> eval_temperatures;
  } training;

  struct TrainerApi {
    std::string listen = "127.0.0.1:8478";
    std::string token_file;  // required when training is enabled
    std::chrono::milliseconds lease_timeout{std::chrono::minutes(10)};
  } trainer_api;
};

// The schema of `kind: rl_job` files; `training_map` picks the form of
// `training` (a map of trainer settings, or the scalar `none`).
Schema JobConfigSchema(bool training_map);

// Validates `file` against JobConfigSchema() and reads it, then checks what
// the schema cannot: known task families, a model path that exists and a
// max_tokens within its context, and the cross-field rules. Errors read
// "path:line: key.path: what is wrong".
Result<JobConfig> ParseJobConfig(const ConfigFile& file);

// Ok when `given` is the same YAML tree as `stored` (the config a job was
// started with; comments and layout aside). Otherwise an error at the first
// key (in `given`'s order) whose value differs, is missing from one, or is
// extra: "given:line: key.path: differs from the config job `job` was
// started with (...)".
Status CheckSameJobConfig(const ConfigFile& given, const ConfigFile& stored, const std::string& job);

}  // namespace flashroll
