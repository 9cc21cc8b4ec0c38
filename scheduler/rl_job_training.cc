// The RL job's training side: the trainer API, the weight loader, the
// trainer process and its restarts, the last published weights, the report.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "common/child_process.h"
#include "common/log.h"
#include "scheduler/rl_job_state.h"
#include "scheduler/trainer_token.h"

namespace flashroll::rl_job_internal {
namespace {

// The python/ folder of this source tree, for the trainer's PYTHONPATH:
// beside the binary's build directory, else the working directory's.
std::string TrainerPythonPath() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path beside = exe.parent_path().parent_path() / "python";
    if (std::filesystem::exists(beside / "flashroll", ec)) return beside.string();
  }
  return std::filesystem::absolute("python", ec).string();
}

// The trainer shares the cores with the engine. Torch's OpenMP workers spin
// while they wait for work by default, and then preempt the engine and each
// other: under load a trainer step ran 2-4x slower than with passive waits,
// which sleep (docs/BENCHMARKS.md, "Trainer step"). A policy the user set is kept.
std::map<std::string, std::string> TrainerEnvironment() {
  const char* existing = std::getenv("PYTHONPATH");
  std::map<std::string, std::string> env = {
      {"PYTHONPATH", TrainerPythonPath() + (existing && *existing ? std::string(":") + existing : "")}};
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  if (wait_policy == nullptr || *wait_policy == '\0') env["OMP_WAIT_POLICY"] = "PASSIVE";
  return env;
}

}  // namespace

void Job::WriteReport() {
  ChildOptions child;
  child.argv = {"/usr/bin/python3", "-m", "flashroll.report", "--log", JobFile("trainer.jsonl"), "--out", JobFile("report.html")};
  if (!eval_.empty()) child.argv.insert(child.argv.end(), {"--eval", JobFile("eval.json")});
  child.env = TrainerEnvironment();
  child.output_path = JobFile("trainer.log");
  auto report = ChildProcess::Start(child);
  const std::optional<int> code = report.ok() ? (*report)->Wait(std::chrono::minutes(1)) : std::nullopt;
  if (code == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    summary_.report = JobFile("report.html");
  } else {
    log::Warn("the HTML report was not written", {{"log", child.output_path}});
  }
}

Status Job::StartTraining() {
  auto token = LoadOrCreateTokenFile(config_.trainer_api.token_file);
  if (!token.ok()) return token.status().Wrap("trainer_api.token_file");
  TrainerApiOptions api;
  const std::string& listen = config_.trainer_api.listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("trainer_api.listen: want HOST:PORT, got " + listen);
  api.http.host = listen.substr(0, colon);
  api.http.port = std::atoi(listen.c_str() + colon + 1);
  api.http.bearer_token = *token;
  api.max_staleness = config_.scheduler.max_staleness;
  api.initial_version = WeightVersion();
  if (resume_point_) api.initial_path = resume_point_->path;
  FR_ASSIGN_OR_RETURN(api.refuse_at_or_below, HighestCheckpointOnDisk(config_.training.checkpoint_dir));
  FR_ASSIGN_OR_RETURN(ledger_, AckLedger::Open(config_.store_path, job_id_, config_.scheduler.max_staleness));
  api.on_weights = [this](const std::string& path, int64_t version) {
    return ledger_->Published(path, version, [&] { return weights_->Start(path, version); });
  };
  api.on_trained = [this](int64_t at_version, int64_t into_version, const std::vector<int64_t>& sample_ids) {
    return ledger_->Acked(at_version, into_version, sample_ids);
  };
  api.status = [this]() -> Json {
    Json status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = summary_.ToJson();
      status["samples_in_flight"] = scheduler_->in_flight();  // started, not finished
    }
    status["tokens_generated"] = EngineStats().generated_tokens;
    const engine::WeightLoaderState w = weights_->state();
    status["weight_version"] = w.version;
    status["pending_version"] = w.pending_version ? Json(*w.pending_version) : Json(nullptr);
    status["last_weights_error"] = w.last_error;
    return status;
  };
  FR_ASSIGN_OR_RETURN(trainer_api_, TrainerApi::Start(&queue_, api));
  log::Info("trainer API listening", {{"url", trainer_api_->base_url()}});

  if (config_.training.eval_tasks > 0) {
    FR_ASSIGN_OR_RETURN(eval_["before"], EvaluateNow("before training"));
  }
  TrainerEndpoints endpoints;
  endpoints.api_url = trainer_api_->base_url();
  endpoints.log_path = JobFile("trainer.jsonl");
  if (config_.training.algorithm == "distill") {
    FR_ASSIGN_OR_RETURN(teacher_, Teacher::Start(config_, *tokenizer_, *token));
    log::Info("teacher serving", {{"url", teacher_->url()}, {"model", teacher_->name()}});
    endpoints.teacher_url = teacher_->url();
    endpoints.teacher_name = teacher_->name();
    endpoints.teacher_token_file = teacher_->token_file();
  }
  ChildOptions child;
  child.argv = TrainerArgv(config_, endpoints);
  child.env = TrainerEnvironment();
  child.output_path = JobFile("trainer.log");
  auto on_event = [this](const std::string& line) {
    log::Info(line, {});
    if (options_.on_status) options_.on_status(line);
  };
  auto trainer = TrainerSupervisor::Start(child, config_.training.restarts, on_event, [this] { TrainerRestarting(); });
  if (!trainer.ok()) return trainer.status().Wrap("training.command");
  trainer_ = std::move(*trainer);
  return Status::Ok();
}

void Job::TrainerRestarting() {
  const auto fail = [this](const Status& error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = error.Wrap("restarting the trainer");
    stop_ = true;
    cv_.notify_all();
  };
  // Not knowing which versions the dead trainer wrote, the job could not
  // refuse them: it stops rather than guess.
  const Result<int64_t> on_disk = HighestCheckpointOnDisk(config_.training.checkpoint_dir);
  if (!on_disk.ok()) return fail(on_disk.status());
  const ReturnedGroups returned = trainer_api_->ReturnUndurable(*on_disk);
  auto forgotten = ledger_->Forget(returned.durable_version);
  if (!forgotten.ok()) {
    // Left recorded, the next published version would mark them trained.
    return fail(forgotten.status());
  }
  log::Info("the dead trainer's unpublished work is served again",
            {{"durable_version", std::to_string(returned.durable_version)},
             {"groups", std::to_string(returned.groups.size())},
             {"released_leases", std::to_string(returned.released_leases)}});
}

Status Job::FinishTraining() {
  // The trainer drains what is queued, is told the queue closed, and exits.
  queue_.Close();
  // A signal (Ctrl-C, SIGTERM) while waiting stops the trainer instead.
  while (!trainer_->finished()) {
    if ((options_.stop && options_.stop->load()) || stalled_.load()) {
      trainer_->Stop();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FR_RETURN_IF_ERROR(trainer_->Wait());
  // The last published checkpoint may still be loading: wait for the load
  // to end, swapped in or failed (a failed one leaves the old weights).
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  engine::WeightLoaderState w = weights_->state();
  while (w.pending_version && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w = weights_->state();
  }
  if (w.pending_version) {
    return Status::DeadlineExceeded("weights version " + std::to_string(*w.pending_version) + " still loading after 5 minutes");
  }
  if (!w.last_error.empty()) log::Warn("a published checkpoint failed to load", {{"error", w.last_error}});
  return Status::Ok();
}

}  // namespace flashroll::rl_job_internal
