// Loading new weights for a running model from a Hugging Face checkpoint
// directory (config.json, generation_config.json, model.safetensors or
// shards with model.safetensors.index.json, and optionally manifest.json)
// that a client names by a path relative to a checkpoint root: the server's
// POST /v1/weights, the RL job's trainer API and Engine::SwapWeights all
// check a checkpoint through WeightLayout::Check, the one place that decides
// whether new weights may replace the running ones.
//
// Two stages, so that a caller can answer before the slow part:
//   1. OpenCheckpointBeneath: opens every file beneath the root
//      (ConfinedRoot: no escape, no FIFO or device), parses config.json, the
//      safetensors headers and the manifest, and checks them against the
//      running model's WeightLayout. No tensor byte is read: this is fast.
//   2. BuildCheckpoint: reads all of the data into memory (so that the
//      engine's first steps on it do not stall on page faults), checks every
//      tensor's bytes against the manifest's sha256, and builds the Model.
// LoadCheckpointBeneath does both.
//
// manifest.json (written by the bundled trainer; optional for other
// writers, and then only stage 1's checks apply):
//   {"tensors": {"<name>": {"dtype": "BF16", "shape": [256], "bytes": 512,
//                            "sha256": "<64 hex digits>"}, ...}}
// It must list exactly the checkpoint's tensors, with the dtype, shape and
// byte count their safetensors headers give.
//
// Thread safety: free functions and immutable value types.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/format/confined_path.h"
#include "engine/format/hf_config.h"
#include "engine/format/model_loader.h"
#include "engine/kernels/dtype.h"
#include "engine/models/model.h"

namespace flashroll::engine {

// Why a checkpoint was refused, for an API error's `param`: the dotted
// config.json key ("num_experts_per_tok", "rope_scaling.factor") or the
// tensor name it concerns; empty when neither applies (an unreadable file).
struct CheckpointProblem {
  std::string param;
};

// A checkpoint's manifest.json: per tensor, what its header must say and
// the sha256 of its bytes.
struct ManifestEntry {
  std::string dtype;  // lower case, as DTypeName spells it
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  std::string sha256;
};
using Manifest = std::map<std::string, ManifestEntry>;

// What new weights must match to replace a running model in place: every
// config.json setting the model families read (sizes, rope, norms, MoE
// routing, tied embeddings, bias, the stop tokens) and every tensor's
// name, shape and dtype. A copy, so it outlives the model.
class WeightLayout {
 public:
  static WeightLayout Of(const Model& model);
  static WeightLayout Of(const ModelFiles& files);

  // Ok, or InvalidArgument naming the file and the first config key or
  // tensor that differs — "<dir>/config.json: num_experts_per_tok: 4 is not
  // 2", "<file>: tensor 'x': shape [3, 4] is not [4, 4]", "... dtype f16 is
  // not bf16", "<dir>: tensor 'x' is missing", "<file>: tensor 'x' is not in
  // the running model" — with that key or tensor in `problem` (may be null).
  Status Check(const ModelFiles& next, CheckpointProblem* problem = nullptr) const;

 private:
  ModelConfig config_;
  struct Tensor {
    kernels::DType dtype;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Tensor> tensors_;
};

// A checkpoint that passed stage 1.
struct OpenedCheckpoint {
  std::unique_ptr<ModelFiles> files;
  std::optional<Manifest> manifest;  // absent: the directory has no manifest.json
};

// Stage 1: opens the checkpoint directory `dir` (relative to `root`) and
// checks it against `expected`. Errors: PermissionDenied for an absolute
// path, an escape from the root or a file that is not a regular one;
// NotFound for a missing config.json or weights file; InvalidArgument for a
// malformed or truncated file, a setting the engine does not support (the
// running model cannot have it), a manifest that disagrees with the headers
// or a mismatch (WeightLayout::Check). `problem` (may be null) gets the key
// or tensor.
Result<OpenedCheckpoint> OpenCheckpointBeneath(const ConfinedRoot& root, const std::string& dir,
                                               const WeightLayout& expected, CheckpointProblem* problem = nullptr);

// Stage 2: reads the weights into memory, checks them against the manifest
// (InvalidArgument naming the first tensor whose sha256 differs) and builds
// the model (Model::Build's errors).
Result<std::unique_ptr<Model>> BuildCheckpoint(OpenedCheckpoint checkpoint);

// Both stages, for a caller that can wait: `root` is opened for this one call.
Result<std::unique_ptr<Model>> LoadCheckpointBeneath(const std::string& root, const std::string& dir,
                                                     const Model& running);

// The manifest of `files` (every tensor, its bytes hashed now), as
// manifest.json holds it; for writers and tests.
Result<Json> ManifestJson(const ModelFiles& files);

}  // namespace flashroll::engine
