#include "engine/serving/weight_loader.h"

#include <algorithm>

#include "common/log.h"

namespace flashroll::engine {
namespace {

using Clock = std::chrono::steady_clock;

// A version swapped in by another caller of Engine::SwapWeights (the RL
// trainer in the same process) notifies no one: waiters look this often.
constexpr std::chrono::milliseconds kVersionPoll{10};

}  // namespace

Result<std::unique_ptr<WeightLoader>> WeightLoader::Create(Engine* engine, const std::string& checkpoint_root) {
  if (engine == nullptr) return Status::InvalidArgument("weight loader: an engine is required");
  std::unique_ptr<ConfinedRoot> root;
  if (!checkpoint_root.empty()) {
    Result<std::unique_ptr<ConfinedRoot>> opened = ConfinedRoot::Open(checkpoint_root);
    if (!opened.ok()) return opened.status().Wrap("--checkpoint-root");
    root = std::move(opened).value();
  }
  return std::unique_ptr<WeightLoader>(new WeightLoader(engine, std::move(root), WeightLayout::Of(engine->model())));
}

WeightLoader::~WeightLoader() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

Status WeightLoader::Start(const std::string& dir, int64_t version, CheckpointProblem* problem) {
  if (root_ == nullptr) {
    return Status::PermissionDenied("no checkpoint root is configured: start the server with --checkpoint-root DIR");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status::Unavailable("the server is stopping");
    if (loading_) {
      return Status::FailedPrecondition(
          pending_version_ ? "weight version " + std::to_string(*pending_version_) + " is loading from \"" +
                                 pending_path_ + "\"; one load at a time"
                           : std::string("another load is being checked; one load at a time"));
    }
    const int64_t current = engine_->weight_version();
    if (version <= current) {
      return Status::FailedPrecondition("version " + std::to_string(version) +
                                        " is not above the current weight version " + std::to_string(current));
    }
    // Held from here until the load ends, so that no second load starts.
    loading_ = true;
  }
  Result<OpenedCheckpoint> opened = OpenCheckpointBeneath(*root_, dir, layout_, problem);
  if (!opened.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      loading_ = false;
    }
    changed_.notify_all();
    return opened.status();
  }
  // The last load has ended (loading_ was false): this join does not wait.
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_version_ = version;
    pending_path_ = dir;
  }
  log::Info("weight load started", {{"version", version}, {"path", dir}});
  thread_ = std::thread(&WeightLoader::Load, this, std::move(opened).value(), dir, version);
  return Status::Ok();
}

void WeightLoader::Load(OpenedCheckpoint checkpoint, std::string dir, int64_t version) {
  const Clock::time_point start = Clock::now();
  Result<std::unique_ptr<Model>> model = BuildCheckpoint(std::move(checkpoint));
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = before_swap_;
  }
  if (hook) hook();
  Status swapped = model.ok() ? engine_->SwapWeights(std::move(model).value(), version) : model.status();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (swapped.ok()) {
    log::Info("weights swapped", {{"version", version}, {"path", dir}, {"seconds", seconds}});
  } else {
    log::Warn("weight load failed; the old weights keep serving",
              {{"version", version}, {"path", dir}, {"error", swapped.ToString()}});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    loading_ = false;
    pending_version_.reset();
    pending_path_.clear();
    if (!swapped.ok()) {
      last_error_ = swapped.ToString();
      last_error_version_ = version;
    }
  }
  changed_.notify_all();
}

WeightLoaderState WeightLoader::state() const {
  WeightLoaderState s;
  s.configured = root_ != nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  s.version = engine_->weight_version();
  s.pending_version = pending_version_;
  s.pending_path = pending_path_;
  s.last_error = last_error_;
  s.last_error_version = last_error_version_;
  return s;
}

Status WeightLoader::WaitForVersion(int64_t version, std::optional<Clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const int64_t current = engine_->weight_version();
    if (current >= version) return Status::Ok();
    if (stopped_) {
      return Status::Unavailable("the server stopped before weight version " + std::to_string(version) +
                                 " arrived (it serves version " + std::to_string(current) + ")");
    }
    const Clock::time_point now = Clock::now();
    if (deadline && now >= *deadline) {
      return Status::DeadlineExceeded("weight version " + std::to_string(version) +
                                      " did not arrive in time (the engine serves version " +
                                      std::to_string(current) + ")");
    }
    changed_.wait_until(lock, deadline ? std::min(now + kVersionPoll, *deadline) : now + kVersionPoll);
  }
}

void WeightLoader::TEST_SetBeforeSwap(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  before_swap_ = std::move(hook);
}

void WeightLoader::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  changed_.notify_all();
}

}  // namespace flashroll::engine
