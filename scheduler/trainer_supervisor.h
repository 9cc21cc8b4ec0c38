// TrainerSupervisor: the RL job's trainer as a supervised child process.
// The job starts it with the trainer flags (TrainerArgv; the contract is in
// docs/TRAINER_API.md), restarts it when it dies — it resumes from its last
// published checkpoint — up to a limit, and stops it when the job ends.
//
// Thread safety: all methods may be called from any thread; one thread owns
// the child and its restarts.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "common/status.h"
#include "scheduler/job_config.h"

namespace flashroll {

// Where the trainer finds the job.
struct TrainerEndpoints {
  std::string api_url;     // the trainer API, http://HOST:PORT
  std::string log_path;    // the trainer's per-step JSON lines
  // distill: the teacher's server, the model name it serves and the file
  // holding its API key (empty: it wants none).
  std::string teacher_url, teacher_name, teacher_token_file;
};

// The trainer's command line: training.command (or /usr/bin/python3 -m
// flashroll.trainers.<algorithm>) followed by the flags every trainer takes
// and those of its algorithm (grpo: --clip, --kl, --negative-weight,
// --entropy-weight, --ratio-bound, --ratio-cap; distill: --teacher-url,
// --teacher-model, --teacher-token-file), nothing another algorithm's
// parser would refuse.
std::vector<std::string> TrainerArgv(const JobConfig& config, const TrainerEndpoints& endpoints);

class TrainerSupervisor {
 public:
  // `restarts`: how many times a trainer that exits non-zero (or is killed)
  // is started again. `on_event` gets one line per start, exit and restart.
  // `before_restart`, if set, runs after a trainer died and before the next
  // one starts (the job gives back what the dead one held).
  // Errors: ChildProcess::Start's, for the first start.
  static Result<std::unique_ptr<TrainerSupervisor>> Start(ChildOptions child, int64_t restarts,
                                                          std::function<void(const std::string&)> on_event,
                                                          std::function<void()> before_restart = {});
  ~TrainerSupervisor();  // Stop()
  TrainerSupervisor(const TrainerSupervisor&) = delete;
  TrainerSupervisor& operator=(const TrainerSupervisor&) = delete;

  // True once the trainer has ended for good: exited 0, failed past its
  // restarts, or was stopped.
  bool finished() const;
  // Blocks until finished(). Ok when the trainer exited 0 (or was stopped);
  // Internal "trainer exited with status N after R restarts (log: PATH)"
  // when it kept failing.
  Status Wait();
  // Ends the trainer (SIGTERM, then SIGKILL) without a restart.
  void Stop();
  int64_t restarts_used() const;

 private:
  TrainerSupervisor(ChildOptions child, int64_t restarts, std::function<void(const std::string&)> on_event,
                    std::function<void()> before_restart)
      : options_(std::move(child)),
        restarts_(restarts),
        on_event_(std::move(on_event)),
        before_restart_(std::move(before_restart)) {}
  void Supervise(std::unique_ptr<ChildProcess> child);

  const ChildOptions options_;
  const int64_t restarts_;
  const std::function<void(const std::string&)> on_event_;
  const std::function<void()> before_restart_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool stop_ = false;       // guarded by mu_
  bool finished_ = false;   // guarded by mu_
  Status result_;           // guarded by mu_; once finished_
  int64_t restarts_used_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace flashroll
