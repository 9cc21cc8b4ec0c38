// WeightLoader: new weights for a running Engine from checkpoint
// directories beneath one root, loaded in the background (the server's
// POST /v1/weights).
//
// Start() does the fast part before returning — the path resolved beneath
// the root, config.json and the safetensors headers read and checked
// against the running model, the version checked — and hands the slow part
// (building the model, reading its weights into memory) to a background
// thread, which then calls Engine::SwapWeights: the engine applies it at the
// next token boundary, and owns the model from then on. One load at a time.
// A failed background load is logged and kept as last_error; the old
// weights keep serving.
//
// WaitForVersion lets a request wait for a weight version (min_version).
//
// Thread safety: all methods may be called from any thread. The engine must
// outlive the loader; the destructor waits for a load in progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "engine/format/confined_path.h"
#include "engine/models/checkpoint.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {

struct WeightLoaderState {
  bool configured = false;                // a checkpoint root is set
  int64_t version = 0;                    // the engine's current weight version
  std::optional<int64_t> pending_version;  // the version loading now
  std::string pending_path;
  std::string last_error;                 // the last failed background load; "" if none
  std::optional<int64_t> last_error_version;
};

class WeightLoader {
 public:
  // `checkpoint_root` empty: Start refuses every load. Otherwise the root is
  // opened now (ConfinedRoot::Open's errors). The engine's model at this
  // moment gives the layout every checkpoint must match (all later versions
  // share it: SwapWeights checks).
  static Result<std::unique_ptr<WeightLoader>> Create(Engine* engine, const std::string& checkpoint_root);
  ~WeightLoader();  // Stop(), then waits for a load in progress
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  // Checks the checkpoint `dir` (relative to the root) and starts loading
  // it as `version`. Errors: PermissionDenied when no root is configured or
  // the path escapes it or names something not a regular file
  // (OpenCheckpointBeneath); NotFound; InvalidArgument naming the tensor or
  // config key that differs (also in `problem`, may be null), or the
  // malformed file; FailedPrecondition when a load is in progress or
  // `version` is not above the current one.
  Status Start(const std::string& dir, int64_t version, CheckpointProblem* problem = nullptr);

  WeightLoaderState state() const;

  // Blocks until the engine's weight version is at least `version`. Errors:
  // DeadlineExceeded at `deadline`; Unavailable once Stop() was called.
  Status WaitForVersion(int64_t version, std::optional<std::chrono::steady_clock::time_point> deadline);

  // Wakes every WaitForVersion (they fail) and refuses new loads; a load in
  // progress runs to its end.
  void Stop();

  // Tests: `hook` runs in the background load just before SwapWeights, so
  // that a test can hold a load in progress.
  void TEST_SetBeforeSwap(std::function<void()> hook);

 private:
  WeightLoader(Engine* engine, std::unique_ptr<ConfinedRoot> root, WeightLayout layout)
      : engine_(engine), root_(std::move(root)), layout_(std::move(layout)) {}
  // The background half of Start: build, swap, record.
  void Load(OpenedCheckpoint checkpoint, std::string dir, int64_t version);

  // Constant after construction.
  Engine* const engine_;
  const std::unique_ptr<ConfinedRoot> root_;  // null: no root configured
  const WeightLayout layout_;

  mutable std::mutex mu_;
  std::condition_variable changed_;  // a load ended, or Stop()
  bool loading_ = false;             // guarded by mu_; from Start's check to the end of Load
  bool stopped_ = false;             // guarded by mu_
  std::optional<int64_t> pending_version_;  // guarded by mu_
  std::string pending_path_;                 // guarded by mu_
  std::string last_error_;                   // guarded by mu_
  std::optional<int64_t> last_error_version_;  // guarded by mu_
  std::function<void()> before_swap_;          // guarded by mu_; TEST_SetBeforeSwap
  std::thread thread_;  // the last background load; joined before the next starts
};

}  // namespace flashroll::engine
