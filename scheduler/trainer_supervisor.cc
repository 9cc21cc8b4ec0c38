#include "scheduler/trainer_supervisor.h"

#include <chrono>
#include <cstdio>

namespace flashroll {
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

}  // namespace

std::vector<std::string> TrainerArgv(const JobConfig& config, const TrainerEndpoints& endpoints) {
  const JobConfig::Training& t = config.training;
  std::vector<std::string> argv = t.command;
  if (argv.empty()) argv = {"/usr/bin/python3", "-m", "flashroll.trainers." + t.algorithm};
  const std::vector<std::string> flags = {
      "--api", endpoints.api_url,
      "--token-file", config.trainer_api.token_file,
      "--model", config.model.path,
      "--checkpoint-root", t.checkpoint_dir,
      "--steps", std::to_string(t.steps),
      "--lr", Number(t.learning_rate),
      "--grad-clip", Number(t.grad_clip),
      "--groups-per-step", std::to_string(config.scheduler.batch_groups),
      "--max-staleness", std::to_string(config.scheduler.max_staleness),
      "--temperature", Number(config.rollout.temperature),
      "--loss-agg", t.loss_agg,
      "--max-tokens", std::to_string(config.rollout.max_tokens),
      "--log", endpoints.log_path,
      "--seed", std::to_string(config.tasks.seed),
  };
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (t.algorithm == "grpo") {
    argv.insert(argv.end(), {"--clip", Number(t.clip), "--kl", Number(t.kl),
                             "--negative-weight", Number(t.negative_weight),
                             "--entropy-weight", Number(t.entropy_weight),
                             "--ratio-bound", t.ratio_bound, "--ratio-cap", Number(t.ratio_cap)});
  }
  if (t.algorithm == "distill") {
    argv.insert(argv.end(), {"--teacher-url", endpoints.teacher_url, "--teacher-model", endpoints.teacher_name});
    if (!endpoints.teacher_token_file.empty()) {
      argv.insert(argv.end(), {"--teacher-token-file", endpoints.teacher_token_file});
    }
  }
  return argv;
}

Result<std::unique_ptr<TrainerSupervisor>> TrainerSupervisor::Start(ChildOptions child, int64_t restarts,
                                                                    std::function<void(const std::string&)> on_event,
                                                                    std::function<void()> before_restart) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> first, ChildProcess::Start(child));
  auto supervisor = std::unique_ptr<TrainerSupervisor>(
      new TrainerSupervisor(std::move(child), restarts, std::move(on_event), std::move(before_restart)));
  if (supervisor->on_event_) supervisor->on_event_("trainer started (pid " + std::to_string(first->pid()) + ")");
  supervisor->thread_ = std::thread([s = supervisor.get(), c = std::move(first)]() mutable { s->Supervise(std::move(c)); });
  return supervisor;
}

TrainerSupervisor::~TrainerSupervisor() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void TrainerSupervisor::Supervise(std::unique_ptr<ChildProcess> child) {
  const std::string log = options_.output_path.empty() ? "" : " (log: " + options_.output_path + ")";
  while (true) {
    std::optional<int> code;
    while (!(code = child->Wait(std::chrono::milliseconds(100)))) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!code) {  // stopped while running
      lock.unlock();
      child->Stop();
      lock.lock();
      finished_ = true;
      break;
    }
    if (*code == 0 || stop_) {
      finished_ = true;
      break;
    }
    if (restarts_used_ >= restarts_) {
      result_ = Status::Internal("trainer exited with status " + std::to_string(*code) + " after " +
                                 std::to_string(restarts_used_) + " restarts" + log);
      finished_ = true;
      break;
    }
    ++restarts_used_;
    const std::string line = "trainer exited with status " + std::to_string(*code) + "; restart " +
                             std::to_string(restarts_used_) + " of " + std::to_string(restarts_) + log;
    lock.unlock();
    if (on_event_) on_event_(line);
    if (before_restart_) before_restart_();
    auto next = ChildProcess::Start(options_);
    lock.lock();
    if (!next.ok()) {
      result_ = next.status().Wrap("restarting the trainer");
      finished_ = true;
      break;
    }
    child = std::move(*next);
  }
  changed_.notify_all();
}

bool TrainerSupervisor::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

Status TrainerSupervisor::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return finished_; });
  return result_;
}

void TrainerSupervisor::Stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  changed_.wait(lock, [&] { return finished_; });
}

int64_t TrainerSupervisor::restarts_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restarts_used_;
}

}  // namespace flashroll
