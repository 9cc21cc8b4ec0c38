#include "scheduler/rl_job.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/store.h"
#include "common/strings.h"
#include "engine/device/device_memory.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/serving/engine.h"
#include "engine/serving/weight_loader.h"
#include "rewards/advantages.h"
#include "rewards/length_reward.h"
#include "rewards/sample_reward.h"
#include "rollout/episode.h"
#include "rollout/failure_kind.h"
#include "rollout/sandbox_workspace.h"
#include "rollout/scaffold.h"
#include "sandbox/sandbox.h"
#include "scheduler/ack_ledger.h"
#include "scheduler/batch_queue.h"
#include "scheduler/export.h"
#include "scheduler/group_selection.h"
#include "scheduler/job_evaluation.h"
#include "scheduler/job_store.h"
#include "scheduler/rl_job_state.h"
#include "scheduler/sample_scheduler.h"
#include "scheduler/teacher.h"
#include "scheduler/trainer_api.h"
#include "scheduler/trainer_supervisor.h"
#include "scheduler/trainer_token.h"
#include "scheduler/training_report.h"
#include "scheduler/trajectory.h"

namespace flashroll {
namespace rl_job_internal {
namespace {

uint64_t SampleSeed(int64_t job_seed, const SampleTicket& t) {
  uint64_t x = static_cast<uint64_t>(job_seed) * 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {static_cast<uint64_t>(t.group_id), static_cast<uint64_t>(t.slot), static_cast<uint64_t>(t.attempt)}) {
    x ^= v + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2);
  }
  return x;
}

sandbox::SandboxSpec SpecOf(const JobConfig::Sandbox& s) {
  sandbox::SandboxSpec spec;
  (void)sandbox::ParseImage(s.image, &spec);  // validated when the job starts
  spec.net = s.net == "policy" ? sandbox::NetMode::kPolicy : sandbox::NetMode::kNone;
  spec.memory_bytes = s.memory_bytes;
  spec.disk_bytes = s.disk_bytes;
  spec.pids = s.pids;
  spec.cpus = s.cpus;
  spec.user = s.user;
  spec.group = s.group;
  return spec;
}

}  // namespace

Status Job::Open() {
  length_params_.k0 = config_.rewards.k0;
  length_params_.c_max = config_.rewards.c_max;
  length_params_.l_norm = config_.rewards.l_norm;
  length_params_.success_only = config_.rewards.length_penalty == "success";
  length_params_.lambda = config_.rewards.lambda;
  scaffold_ = FindScaffold(config_.rollout.scaffold);
  if (Status s = sandbox::ParseImage(config_.sandbox.image, &spec_); !s.ok()) return s.Wrap("sandbox.image");
  spec_ = SpecOf(config_.sandbox);

  if (const auto dir = std::filesystem::path(config_.store_path).parent_path(); !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IoError("store " + config_.store_path + ": create " + dir.string() + ": " + ec.message());
  }
  FR_ASSIGN_OR_RETURN(db_, store::OpenStore(config_.store_path));
  const bool resumed = !options_.resume.empty();
  if (resumed) {
    auto job = FindJob(*db_, options_.resume);
    if (!job.ok()) return job.status().Wrap("--resume");
    job_id_ = *job;
    FR_RETURN_IF_ERROR(store::SetJobStatus(*db_, job_id_, store::JobStatus::kRunning));
  } else {
    auto job = store::CreateJob(*db_, config_.name, options_.config_yaml);
    if (job.status().code() == Code::kAlreadyExists) {
      return Status::AlreadyExists("job '" + config_.name + "' already exists in " + config_.store_path +
                                   ": resume it with --resume " + config_.name + " or rename the job");
    }
    FR_RETURN_IF_ERROR(job.status());
    job_id_ = *job;
  }
  summary_.job_id = job_id_;
  if (options_.on_started) options_.on_started(job_id_);
  FR_ASSIGN_OR_RETURN(tasks_, PrepareTasks(*db_, job_id_, config_, resumed));
  std::map<int64_t, std::set<int>> done;
  if (resumed) {
    FR_ASSIGN_OR_RETURN(done, RecoverSlots(*db_, job_id_));
  }

  // Groups: every task x effort, task-major; ids are stable across resumes.
  std::vector<GroupPlan> plan;
  const int64_t efforts = static_cast<int64_t>(config_.rollout.efforts.size());
  int64_t max_groups = static_cast<int64_t>(tasks_.size()) * efforts;
  if (config_.scheduler.max_samples > 0) {
    max_groups = std::min(max_groups, (config_.scheduler.max_samples + config_.scheduler.group_size - 1) /
                                          config_.scheduler.group_size);
  }
  for (int64_t g = 0; g < max_groups; ++g) {
    GroupPlan group;
    group.group_id = g + 1;
    group.task_index = g / efforts;
    group.family = tasks_[static_cast<size_t>(group.task_index)].task.family;
    group.effort = static_cast<int>(config_.rollout.efforts[static_cast<size_t>(g % efforts)]);
    for (int slot : done[group.group_id]) {
      if (slot < config_.scheduler.group_size) group.slots_done.insert(slot);
    }
    groups_[group.group_id] = group;
    plan.push_back(group);
  }
  SchedulerPolicy policy;
  policy.group_size = config_.scheduler.group_size;
  policy.max_in_flight = config_.scheduler.max_in_flight;
  policy.max_per_task = config_.scheduler.max_per_task;
  policy.max_staleness = config_.scheduler.max_staleness;
  policy.batch_groups = config_.scheduler.batch_groups;
  policy.staleness_gate = config_.training.enabled;
  policy.warmup_samples = config_.scheduler.warmup_samples;
  policy.warmup_min_tokens = config_.scheduler.warmup_min_tokens;
  policy.rate_limits = config_.scheduler.rate_limits;
  policy.synchronous = config_.scheduler.synchronous;
  policy.infra_retries = config_.scheduler.infra_retries;
  if (config_.scheduler.task_selection.enabled) {
    // Called by the scheduler under mu_, as FinishGroups records outcomes.
    policy.select = [this](const GroupPlan& group) { return selector_.Accept(CellOf(group)); };
  }
  scheduler_ = std::make_unique<SampleScheduler>(policy, plan, Clock::now());
  summary_.groups_total = scheduler_->groups_total();

  FR_ASSIGN_OR_RETURN(const engine::DeviceSpec device, engine::ParseDevice(config_.model.device));
  if (config_.policy.url.empty()) {
    // A GPU that cannot hold the model and its KV pool is reported before the weights load.
    const int64_t needed = engine::DeviceWeightBytes(device, config_.model.path) + static_cast<int64_t>(config_.model.kv_memory_bytes);
    FR_RETURN_IF_ERROR(engine::CheckDevice(device, needed).Wrap("model.device"));
  }
  FR_ASSIGN_OR_RETURN(model_, engine::Model::Load(config_.model.path));
  FR_ASSIGN_OR_RETURN(tokenizer_, engine::LoadModelTokenizer(*model_));
  engine::EngineOptions engine_options;
  engine_options.device = device;
  engine_options.threads = static_cast<int>(config_.model.threads);
  engine_options.max_running = config_.scheduler.max_in_flight;
  engine_options.kv_memory_bytes = static_cast<int64_t>(config_.model.kv_memory_bytes);
  engine_options.reprefill_older_than = config_.model.reprefill_older_than;
  if (config_.policy.url.empty()) {
    FR_ASSIGN_OR_RETURN(engine_, engine::Engine::Start(*model_, tokenizer_.get(), engine_options));
    policy_ = EnginePolicy(*engine_, config_.model.sessions);
  } else {
    OpenAiPolicyOptions remote;
    remote.url = config_.policy.url;
    remote.model = config_.policy.model;
    remote.max_model_len = model_->MaxPositions();
    if (!config_.policy.api_key_file.empty()) {
      auto key = LoadTokenFile(config_.policy.api_key_file);
      if (!key.ok()) return key.status().Wrap("policy.api_key_file");
      remote.api_key = *key;
    }
    auto policy = OpenAiPolicy(remote);
    if (!policy.ok()) return policy.status().Wrap("policy.url");
    policy_ = std::move(*policy);
  }
  if (config_.training.enabled) {
    std::error_code ec;
    std::filesystem::create_directories(config_.training.checkpoint_dir, ec);
    if (ec) return Status::IoError("training.checkpoint_dir " + config_.training.checkpoint_dir + ": " + ec.message());
    auto loader = engine::WeightLoader::Create(engine_.get(), config_.training.checkpoint_dir);
    if (!loader.ok()) return loader.status().Wrap("training.checkpoint_dir");
    weights_ = std::move(*loader);
    // A resumed job continues on the last weights its trainer published
    // (recorded in the store; a checkpoint on disk beyond it was never
    // published, and the groups its step trained are served again).
    if (resumed) {
      FR_ASSIGN_OR_RETURN(resume_point_, ResumePoint(*db_, job_id_));
    }
    if (const auto& latest = resume_point_) {
      FR_RETURN_IF_ERROR(weights_->Start(latest->path, latest->version).Wrap("resuming on checkpoint " + latest->path));
      FR_RETURN_IF_ERROR(weights_->WaitForVersion(latest->version, Clock::now() + std::chrono::minutes(5)));
      log::Info("resumed on published weights", {{"checkpoint", latest->path}, {"version", std::to_string(latest->version)}});
    }
  }
  sandbox::Manager::Options sandbox_options;
  sandbox_options.allow_unenforced_limits = config_.sandbox.allow_unenforced_limits;
  auto manager = sandbox::Manager::Open(sandbox_options);
  if (!manager.ok()) return manager.status().Wrap("the job's sandboxes");
  manager_ = std::move(*manager);

  // The groups a stopped or killed job finished are queued again, except
  // those a published checkpoint holds (recorded trained). A group acked
  // but not yet in a published checkpoint is served again (its ack was
  // cleared above): the trainer resumes from that checkpoint, without its
  // update.
  std::set<int64_t> trained;
  if (resumed) {
    FR_ASSIGN_OR_RETURN(trained, DurablyTrainedGroups(*db_, job_id_));
  }
  std::vector<int64_t> finished_before;
  for (const auto& [id, group] : groups_) {
    if (group.missing(config_.scheduler.group_size) > 0) continue;
    if (trained.count(id)) {
      summary_.groups_done += 1;
    } else {
      finished_before.push_back(id);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    FinishGroups(*db_, finished_before, /*opened_here=*/false);
  }
  return Status::Ok();
}

void Job::FinishGroups(sqlite::Database& db, const std::vector<int64_t>& groups, bool opened_here) {
  for (int64_t group_id : groups) {
    auto samples = LoadGroupSamples(db, job_id_, group_id);
    if (!samples.ok()) {
      if (first_error_.ok()) first_error_ = samples.status().Wrap("group " + std::to_string(group_id));
      continue;
    }
    // An infrastructure failure is no outcome of the agent's: it stays out
    // of the group's statistics and of training, whatever rewards.failed.
    std::erase_if(*samples, [](const StoredSample& s) { return !s.failure_kind.empty(); });
    std::vector<GroupMember> members;
    std::vector<GroupSampleOutcome> outcomes;
    int64_t successes = 0;
    for (const StoredSample& s : *samples) {
      const bool failed = s.sample.status != "completed";
      members.push_back({s.sample.reward, failed});
      outcomes.push_back({s.sample.reward, s.sample.success, failed});
      successes += !failed && s.sample.success ? 1 : 0;
    }
    const GroupPlan& plan = groups_[group_id];
    selector_.Record(CellOf(plan), successes,
                     std::count_if(outcomes.begin(), outcomes.end(), [](const GroupSampleOutcome& o) { return !o.failed; }));
    const auto advantages = GroupAdvantages(
        members, config_.rewards.advantage == "dr_grpo" ? AdvantageMode::kDrGrpo : AdvantageMode::kGrpo);
    std::vector<store::SampleAdvantage> rows;
    TrainingGroup group;
    group.group_id = group_id;
    group.effort = plan.effort;
    group.task_id = tasks_[static_cast<size_t>(plan.task_index)].store_id;
    group.task_key = tasks_[static_cast<size_t>(plan.task_index)].task.id;
    for (size_t i = 0; i < samples->size(); ++i) {
      StoredSample& s = (*samples)[i];
      s.sample.advantage = advantages[i];
      if (s.sample.status == "completed") rows.push_back({s.sample.sample_id, advantages[i]});
      if (s.sample.status != "completed" && config_.rewards.failed == "exclude") continue;
      group.samples.push_back(std::move(s.sample));
    }
    if (Status st = store::RecordAdvantages(db, rows); !st.ok() && first_error_.ok()) first_error_ = st;
    summary_.groups_done += 1;
    if (IsZeroVariance(dynamic_sampling_, outcomes)) {
      // Dynamic sampling: nothing to learn, so never queued; counted as
      // consumed by the staleness gate, which opens another group instead.
      summary_.groups_skipped_zero_variance += 1;
      if (opened_here) scheduler_->Unqueued(1);
    } else if (!group.samples.empty()) {
      (void)queue_.Add(std::move(group));
    } else {
      // Never queued, so never consumed: without counting it the staleness
      // gate would stay closed for good once enough such groups finished.
      summary_.groups_unqueued += 1;
      if (opened_here) scheduler_->Unqueued(1);
    }
  }
}

void Job::RecordSandboxEvents(sqlite::Database& db, const std::string& sandbox_id, int64_t sample_id) {
  store::SandboxEvent event;
  event.sandbox_id = sandbox_id;
  event.sample_id = sample_id;
  if (auto page = manager_->EventsSince(sandbox_id, 0); page.ok()) {
    for (const sandbox::SandboxEvent& e : page->events) {
      const std::optional<store::SandboxEventKind> kind = store::ParseSandboxEventKind(sandbox::EventKindName(e.kind));
      // Its creation and destruction are the job's own doing, recorded once below.
      if (!kind || *kind == store::SandboxEventKind::kCreated || *kind == store::SandboxEventKind::kDestroyed) continue;
      event.kind = *kind;
      event.detail_json = nlohmann::json{{"detail", e.detail}}.dump();
      (void)store::RecordSandboxEvent(db, event);
    }
  }
  event.kind = store::SandboxEventKind::kDestroyed;
  event.detail_json = "{}";
  (void)store::RecordSandboxEvent(db, event);
}

void Job::RunSample(sqlite::Database& db, const SampleTicket& ticket) {
  const JobTask& job_task = tasks_[static_cast<size_t>(ticket.task_index)];
  const Task& task = job_task.task;
  store::NewSample row;
  row.task_id = job_task.store_id;
  row.group_id = ticket.group_id;
  row.effort = ticket.effort;
  row.scaffold = scaffold_->name();
  row.slot = ticket.slot;
  Result<int64_t> sample_id = store::InsertSample(db, row);
  if (sample_id.ok()) {
    if (Status s = store::StartSample(db, *sample_id); !s.ok()) sample_id = s;
  }
  if (!sample_id.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = sample_id.status().Wrap("store sample of " + task.id);
    stop_ = true;
    cv_.notify_all();
    return;
  }

  EpisodeOptions episode_options;
  episode_options.effort = ticket.effort;
  episode_options.max_turns = static_cast<int>(config_.rollout.max_turns);
  episode_options.max_tokens = config_.rollout.max_tokens;
  episode_options.temperature = config_.rollout.temperature;
  episode_options.seed = SampleSeed(config_.tasks.seed, ticket);
  episode_options.tool_timeout = config_.sandbox.exec_timeout;
  episode_options.cancel = &cancel_episodes_;
  if (config_.scheduler.sample_timeout.count() > 0) {
    episode_options.deadline = Clock::now() + config_.scheduler.sample_timeout;
  }
  Result<Episode> episode = Status::Internal("not run");
  // Set when the attempt failed for a reason no token of the policy's
  // could have caused: the slot runs again (within scheduler.infra_retries).
  std::optional<FailureKind> failure_kind;
  std::string sandbox_id;
  {
    Result<std::unique_ptr<SandboxWorkspace>> workspace = Status::Internal("not created");
    if (auto spec = TaskSandboxSpec(spec_, task, config_.sandbox.max); spec.ok()) {
      workspace = SandboxWorkspace::Create(*manager_, *spec);
    } else {
      workspace = spec.status();
    }
    if (workspace.ok()) {
      sandbox_id = (*workspace)->id();
      try {
        episode = RunEpisode(*policy_, *tokenizer_, *scaffold_, task, **workspace, episode_options);
      } catch (const std::bad_alloc&) {
        // The sandbox's memory is its cgroup's; this allocation was the job's.
        episode = Status::ResourceExhausted("episode " + task.id + ": the job ran out of memory");
        failure_kind = FailureKind::kHostOom;
      }
    } else {
      episode = workspace.status().Wrap("sandbox for " + task.id);
      failure_kind = FailureKind::kSandboxStart;
    }
  }
  if (episode.ok() && episode->failure_kind) {
    failure_kind = episode->failure_kind;
  } else if (!episode.ok() && !failure_kind) {
    failure_kind = FailureKind::kHarnessCrash;  // RunEpisode's own errors: the harness's
  }

  store::SampleOutcome outcome;
  outcome.sample_id = *sample_id;
  if (episode.ok()) {
    // Computed whatever became of the sample.
    outcome.prefill_tokens = episode->prefill_tokens;
    outcome.reprefill_tokens = episode->reprefill_tokens;
  }
  std::vector<store::Turn> turns;
  int64_t generated = 0;
  bool failed = false;
  if (failure_kind) {
    // The environment or the machinery broke: no outcome of the agent's,
    // so no reward, and never trained on (the report's repercussion signal).
    failed = true;
    outcome.status = store::SampleStatus::kFailed;
    outcome.failure_kind = FailureKindName(*failure_kind);
    outcome.error = episode.ok() ? episode->failure : episode.status().ToString();
  } else if (episode->stop_reason == "cancelled") {
    outcome.status = store::SampleStatus::kAborted;
    outcome.error = "cancelled: the job stopped";
  } else {
    const Episode& e = *episode;
    for (uint8_t s : e.sampled) generated += s;
    const int64_t l = e.reasoning_tokens();
    const SampleReward reward = ScoreSample(length_params_, ticket.effort, l, e.verdict.success);
    outcome.reward = reward.total();
    outcome.reward_parts_json = nlohmann::json{{"verifier", reward.verifier}, {"length", reward.length}}.dump();
    outcome.reasoning_tokens = l;
    outcome.total_tokens = static_cast<int64_t>(e.tokens.size());
    for (const EpisodeTurn& t : e.turns) {
      outcome.generate_ms += t.generate_ms;
      outcome.tool_ms += t.tool_ms;
    }
    outcome.verify_ms = e.verify_ms;
    int32_t first = -1, last = -1;
    for (int32_t v : e.versions) {
      if (v < 0) continue;
      if (first < 0) first = v;
      last = v;
    }
    if (first >= 0) {
      outcome.first_policy_version = first;
      outcome.last_policy_version = last;
    }
    if (e.stop_reason == "deadline") {
      failed = true;
      outcome.status = store::SampleStatus::kFailed;
      outcome.error = "deadline: the sample ran past scheduler.sample_timeout";
    } else {
      outcome.status = store::SampleStatus::kCompleted;
      if (!e.verdict.success) outcome.error.clear();
    }
    turns = TrajectoryTurns(*sample_id, e, *tokenizer_, WeightVersion(), config_.scheduler.max_staleness);
  }
  if (!sandbox_id.empty()) RecordSandboxEvents(db, sandbox_id, *sample_id);

  std::lock_guard<std::mutex> lock(mu_);
  if (outcome.status == store::SampleStatus::kAborted) {
    // Stopped by the job: not finished; a resume runs it again.
    if (Status s = store::CompleteSample(db, outcome, {}); !s.ok() && first_error_.ok()) first_error_ = s;
    cv_.notify_all();
    return;
  }
  const bool kept = scheduler_->Finish(ticket, generated, failed, failure_kind.has_value());
  if (failure_kind) {
    const std::string kind = FailureKindName(*failure_kind);
    summary_.failure_kinds[kind] += 1;
    summary_.failure_kinds_by_task[task.id][kind] += 1;
    log::Warn("infrastructure failure", {{"task", task.id}, {"kind", kind}, {"error", outcome.error},
                                         {"run_again", kept ? "no" : "yes"}});
    if (scheduler_->quarantined().count(ticket.task_index) &&
        std::find(summary_.quarantined_tasks.begin(), summary_.quarantined_tasks.end(), task.id) ==
            summary_.quarantined_tasks.end()) {
      summary_.quarantined_tasks.push_back(task.id);
      summary_.groups_total = scheduler_->groups_total();
      log::Warn("task quarantined: its environment keeps failing",
                {{"task", task.id}, {"kind", kind}, {"groups_not_run", std::to_string(scheduler_->groups_quarantined())}});
    }
  }
  if (!kept) {
    outcome.status = store::SampleStatus::kSuperseded;
    outcome.error = failure_kind ? "infrastructure failure, the slot runs again: " + outcome.error
                                 : "warm-up drop: " + std::to_string(generated) +
                                       " tokens, under scheduler.warmup_min_tokens";
  }
  if (Status s = store::CompleteSample(db, outcome, kept ? turns : std::vector<store::Turn>{}); !s.ok()) {
    if (first_error_.ok()) first_error_ = s;
    stop_ = true;
  }
  if (kept && failure_kind) {
    summary_.samples_done += 1;  // in failure_kinds, not in any effort's rates
  } else if (kept) {
    summary_.samples_done += 1;
    EffortSummary& e = summary_.by_effort[ticket.effort];
    e.samples += 1;
    e.failed += failed ? 1 : 0;
    e.successes += episode.ok() && episode->verdict.success && !failed ? 1 : 0;
    e.reward_sum += outcome.reward.value_or(0.0);
    e.reasoning_tokens += outcome.reasoning_tokens;
  } else {
    summary_.samples_dropped += 1;
  }
  FinishGroups(db, scheduler_->TakeFinishedGroups(), /*opened_here=*/true);
  cv_.notify_all();
}

void Job::Worker() {
  auto db = store::OpenStore(config_.store_path);
  if (!db.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = db.status();
    stop_ = true;
    cv_.notify_all();
    return;
  }
  while (true) {
    std::optional<SampleTicket> ticket;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!Stopping() && !scheduler_->done() && !(ticket = scheduler_->Next(Clock::now()))) {
        // Woken by a finished sample or a consumed batch; the timeout covers
        // rate limits, which open with time alone.
        cv_.wait_for(lock, std::chrono::milliseconds(100));
      }
    }
    if (!ticket) return;
    RunSample(**db, *ticket);
  }
}

std::string Job::StatusLine(double seconds) {
  // A training job ends when its trainer took training.steps steps, long
  // before every planned group ran: its total is the steps, not the groups.
  const std::string groups = trainer_ ? std::to_string(summary_.groups_done) + " (" +
                                            std::to_string(summary_.groups_total) + " planned)"
                                      : std::to_string(summary_.groups_done) + "/" + std::to_string(summary_.groups_total);
  std::string line = "samples " + std::to_string(summary_.samples_done) + " (" +
                     FixedPoint(seconds > 0 ? static_cast<double>(summary_.samples_done) / seconds : 0.0, 2) + "/s)  groups " +
                     groups + "  reward";
  for (const auto& [effort, e] : summary_.by_effort) {
    line += " b=" + std::to_string(effort) + ":" + FixedPoint(e.samples ? e.reward_sum / static_cast<double>(e.samples) : 0.0, 2);
  }
  const engine::EngineStats stats = EngineStats();
  line += "  version " + std::to_string(WeightVersion()) + "  in flight " +
          std::to_string(scheduler_->in_flight()) + "  engine " +
          FixedPoint(seconds > 0 ? static_cast<double>(stats.generated_tokens) / seconds : 0.0, 0) + " tok/s  busy " +
          FixedPoint(polls_ ? 100.0 * static_cast<double>(busy_polls_) / static_cast<double>(polls_) : 0.0, 0) + "%";
  if (trainer_) {
    line += "  " + LastStepStatus(JobFile("trainer.jsonl"), config_.training.steps);
  }
  return line;
}

void Job::Monitor() {
  const auto start = Clock::now();
  auto next_status = start + options_.status_interval;
  // What counts as progress; unchanged for stall_timeout, the job fails.
  std::array<int64_t, 4> progress{-1, -1, -1, -1};
  auto progressed_at = start;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(20), [&] {
            return Stopping() || (scheduler_->done() && scheduler_->in_flight() == 0);
          })) {
        // Stopped from outside: episodes in flight end at their next token
        // (their samples run again on --resume).
        if (options_.stop && options_.stop->load()) cancel_episodes_ = true;
        return;
      }
      const engine::EngineStats stats = EngineStats();
      ++polls_;
      if (stats.running + stats.waiting > 0) {
        ++busy_polls_;
        running_sum_ += stats.running;
      }
      if (trainer_ && trainer_->finished() && !stop_.load()) {
        // The trainer took its steps (or gave up): the rollouts end now.
        stop_ = true;
        cancel_episodes_ = true;
        cv_.notify_all();
      }
      const BatchQueueStats queue = queue_.Stats();
      // Fewer when a dead trainer's undurable groups were queued again.
      if (queue.consumed != consumed_seen_) {
        scheduler_->Consumed(queue.consumed - consumed_seen_);
        consumed_seen_ = queue.consumed;
        cv_.notify_all();
      }
      const std::array<int64_t, 4> now_progress{summary_.samples_done, queue.consumed, stats.generated_tokens,
                                                WeightVersion()};
      if (now_progress != progress) {
        progress = now_progress;
        progressed_at = Clock::now();
      } else if (config_.scheduler.stall_timeout.count() > 0 &&
                 Clock::now() - progressed_at >= config_.scheduler.stall_timeout) {
        if (first_error_.ok()) {
          first_error_ = Status::DeadlineExceeded(
              "stalled: no sample finished, no token generated, no group consumed and no weights published for " +
              std::to_string(config_.scheduler.stall_timeout.count()) + " ms (scheduler.stall_timeout): " +
              scheduler_->WaitReason() + "; trainer queue: " + std::to_string(queue.queued) + " queued, " +
              std::to_string(queue.leased) + " leased, " + std::to_string(summary_.groups_unqueued) + " unqueued");
        }
        stalled_ = true;
        stop_ = true;
        cancel_episodes_ = true;
        cv_.notify_all();
        return;
      }
      if (options_.on_status && Clock::now() >= next_status) {
        next_status += options_.status_interval;
        options_.on_status(StatusLine(std::chrono::duration<double>(Clock::now() - start).count()));
      }
    }
  }
}

TaskCell Job::CellOf(const GroupPlan& group) const {
  const Task& task = tasks_[static_cast<size_t>(group.task_index)].task;
  return {task.family, task.difficulty, group.effort};
}

std::string Job::JobFile(const std::string& suffix) const {
  return (std::filesystem::path(config_.store_path).parent_path() / (config_.name + "-" + suffix)).string();
}

Result<Json> Job::EvaluateNow(const char* when) {
  if (options_.on_status) {
    options_.on_status(std::string("evaluating ") + when + ": " + std::to_string(JobEvaluationEpisodes(config_)) +
                       " episodes on weight version " + std::to_string(engine_->weight_version()));
  }
  FR_ASSIGN_OR_RETURN(Json out, RunJobEvaluation(config_, *scaffold_, spec_, *policy_, *tokenizer_, *manager_));
  out["weight_version"] = engine_->weight_version();
  return out;
}

Result<RlJobSummary> Job::EvaluateOnly() {
  FR_ASSIGN_OR_RETURN(eval_["before"], EvaluateNow("on model.path"));
  if (!options_.evaluate_weights.empty()) {
    const std::filesystem::path root = std::filesystem::absolute(config_.training.checkpoint_dir);
    const std::filesystem::path weights = std::filesystem::absolute(options_.evaluate_weights);
    const int64_t version = WeightVersion() + 1;
    FR_RETURN_IF_ERROR(weights_->Start(weights.lexically_relative(root).string(), version).Wrap("--weights"));
    FR_RETURN_IF_ERROR(weights_->WaitForVersion(version, Clock::now() + std::chrono::minutes(5)).Wrap("--weights"));
    FR_ASSIGN_OR_RETURN(eval_["after"], EvaluateNow(("on " + options_.evaluate_weights).c_str()));
  }
  std::ofstream(JobFile("eval.json")) << eval_.dump(2) << "\n";
  FR_RETURN_IF_ERROR(store::SetJobStatus(*db_, job_id_, store::JobStatus::kCompleted));
  std::lock_guard<std::mutex> lock(mu_);
  summary_.status = "completed";
  summary_.weight_version = WeightVersion();
  summary_.eval = eval_;
  return summary_;
}

Result<RlJobSummary> Job::Run() {
  FR_RETURN_IF_ERROR(Open());
  if (options_.evaluate_only) return EvaluateOnly();
  if (config_.training.enabled) FR_RETURN_IF_ERROR(StartTraining());
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int64_t i = 0; i < config_.scheduler.max_in_flight; ++i) workers.emplace_back([this] { Worker(); });
  std::thread monitor([this] { Monitor(); });
  for (std::thread& w : workers) w.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // ends the monitor
    cv_.notify_all();
  }
  monitor.join();
  const double rollout_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Status training = Status::Ok();
  if (trainer_) {
    training = FinishTraining();
    const bool interrupted = options_.stop && options_.stop->load();
    if (training.ok() && !interrupted && config_.training.eval_tasks > 0) {
      auto after = EvaluateNow("after training");
      if (after.ok()) {
        eval_["after"] = std::move(*after);
      } else {
        training = after.status().Wrap("evaluation after training");
      }
    }
    if (!eval_.empty()) {
      std::ofstream(JobFile("eval.json")) << eval_.dump(2) << "\n";
    }
    std::error_code ec;
    if (training.ok() && std::filesystem::exists(JobFile("trainer.jsonl"), ec)) WriteReport();
  }
  if (trainer_api_) trainer_api_->Stop();
  queue_.Close();

  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_.ok() && !training.ok()) first_error_ = training;
  if (!first_error_.ok()) {
    (void)store::SetJobStatus(*db_, job_id_, store::JobStatus::kFailed);
    return first_error_;
  }
  // A training job is complete when its trainer is: it took its steps or
  // used up the groups.
  const bool finished = trainer_ ? !(options_.stop && options_.stop->load()) : scheduler_->done();
  FR_RETURN_IF_ERROR(store::SetJobStatus(*db_, job_id_, finished ? store::JobStatus::kCompleted : store::JobStatus::kPaused));
  summary_.status = finished ? "completed" : "paused";
  summary_.samples_dropped = scheduler_->samples_dropped();
  summary_.groups_deselected = scheduler_->groups_deselected();
  summary_.wall_seconds = rollout_seconds;
  summary_.busy_fraction = polls_ ? static_cast<double>(busy_polls_) / static_cast<double>(polls_) : 0.0;
  summary_.mean_batch = busy_polls_ ? static_cast<double>(running_sum_) / static_cast<double>(busy_polls_) : 0.0;
  summary_.engine_tokens_per_second =
      summary_.wall_seconds > 0 ? static_cast<double>(EngineStats().generated_tokens) / summary_.wall_seconds : 0.0;
  FR_ASSIGN_OR_RETURN(const store::JobTokenTotals tokens, store::LoadJobTokenTotals(*db_, job_id_));
  summary_.prefill_tokens = tokens.prefill_tokens;
  summary_.reprefill_tokens = tokens.reprefill_tokens;
  summary_.trained_tokens = tokens.trained_tokens;
  if (trainer_) {
    summary_.weight_version = engine_->weight_version();
    summary_.trainer_restarts = trainer_->restarts_used();
    summary_.eval = eval_;
    summary_.trainer_log = JobFile("trainer.jsonl");
  }
  return summary_;
}

}  // namespace rl_job_internal

Result<RlJobSummary> RunRlJob(const JobConfig& config, const RlJobOptions& options) {
  rl_job_internal::Job job(config, options);
  return job.Run();
}

}  // namespace flashroll
