// Loading new weights for a running model from a Hugging Face checkpoint
// directory (config.json, generation_config.json, model.safetensors or
// shards with model.safetensors.index.json) that a client names by a path
// relative to a checkpoint root: the server's POST /v1/weights and the RL
// trainer both come through here.
//
// Two stages, so that a caller can answer before the slow part:
//   1. OpenCheckpointBeneath: opens every file beneath the root
//      (ConfinedRoot: no escape, no FIFO or device), parses config.json and
//      the safetensors headers, and checks them against the running model's
//      WeightLayout. Tensor data is mapped but not read: this is fast.
//   2. BuildCheckpoint: builds the Model and reads all of its data into
//      memory, so that Engine::SwapWeights' first steps on it do not stall
//      on page faults.
// LoadCheckpointBeneath does both.
//
// Thread safety: free functions and an immutable value type.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/format/confined_path.h"
#include "engine/format/model_loader.h"
#include "engine/kernels/dtype.h"
#include "engine/models/model.h"

namespace flashroll::engine {

// What new weights must match to replace a running model's in place: the
// architecture, the config's sizes, and every tensor's name, shape and dtype
// (what Engine::SwapWeights checks). A copy, so it outlives the model.
class WeightLayout {
 public:
  static WeightLayout Of(const Model& model);

  // Ok, or InvalidArgument naming the file and the first config field or
  // tensor that differs: "<dir>/config.json: hidden_size: 128 is not 256",
  // "<file>: tensor 'x': shape [3, 4] is not [4, 4]", "... dtype F16 is not
  // BF16", "<dir>: tensor 'x' is missing", "<file>: tensor 'x' is not in the
  // running model".
  Status Check(const ModelFiles& next) const;

 private:
  struct Tensor {
    kernels::DType dtype;
    std::vector<int64_t> shape;
  };
  std::string architecture_;
  std::vector<std::pair<const char*, int64_t>> fields_;  // config.json key, value
  std::map<std::string, Tensor> tensors_;
};

// Stage 1: opens the checkpoint directory `dir` (relative to `root`) and
// checks it against `expected`. Errors: PermissionDenied for an absolute
// path, an escape from the root or a file that is not a regular one;
// NotFound for a missing config.json or weights file; InvalidArgument for a
// malformed or truncated file (the checkpoint is the caller's input) or a
// mismatch (WeightLayout::Check); Unimplemented for a setting or dtype the
// engine does not support.
Result<std::unique_ptr<ModelFiles>> OpenCheckpointBeneath(const ConfinedRoot& root, const std::string& dir,
                                                          const WeightLayout& expected);

// Stage 2: builds the model over `files` and reads its weights into memory.
// Errors: those of Model::Build.
Result<std::unique_ptr<Model>> BuildCheckpoint(std::unique_ptr<ModelFiles> files);

// Both stages, for a caller that can wait (the trainer): `root` is opened
// for this one call.
Result<std::unique_ptr<Model>> LoadCheckpointBeneath(const std::string& root, const std::string& dir,
                                                     const Model& running);

}  // namespace flashroll::engine
