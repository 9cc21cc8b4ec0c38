#include "engine/models/checkpoint.h"

namespace flashroll::engine {
namespace {

// The config sizes Engine::SwapWeights compares, by their config.json keys.
std::vector<std::pair<const char*, int64_t>> ConfigFields(const ModelConfig& c) {
  return {{"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.num_kv_heads},
          {"head_dim", c.head_dim},
          {"max_position_embeddings", c.max_position_embeddings}};
}

}  // namespace

WeightLayout WeightLayout::Of(const Model& model) {
  WeightLayout layout;
  layout.architecture_ = model.config().architecture;
  layout.fields_ = ConfigFields(model.config());
  for (const auto& [name, t] : model.files().tensors()) layout.tensors_.emplace(name, Tensor{t.dtype, t.shape});
  return layout;
}

Status WeightLayout::Check(const ModelFiles& next) const {
  const std::string where = next.config_file() + ": ";
  if (next.config().architecture != architecture_) {
    return Status::InvalidArgument(where + "model_type: " + next.config().architecture + " is not " + architecture_);
  }
  const auto fields = ConfigFields(next.config());
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (fields[i].second != fields_[i].second) {
      return Status::InvalidArgument(where + fields_[i].first + ": " + std::to_string(fields[i].second) + " is not " +
                                     std::to_string(fields_[i].second));
    }
  }
  const auto& tensors = next.tensors();
  for (const auto& [name, want] : tensors_) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return Status::InvalidArgument(next.path() + ": tensor '" + name + "' is missing");
    const WeightTensor& got = it->second;
    if (got.shape != want.shape) {
      return Status::InvalidArgument(got.file + ": tensor '" + name + "': shape " + ShapeString(got.shape) +
                                     " is not " + ShapeString(want.shape));
    }
    if (got.dtype != want.dtype) {
      return Status::InvalidArgument(got.file + ": tensor '" + name + "': dtype " + kernels::DTypeName(got.dtype) +
                                     " is not " + kernels::DTypeName(want.dtype));
    }
  }
  for (const auto& [name, got] : tensors) {
    if (tensors_.count(name) == 0) {
      return Status::InvalidArgument(got.file + ": tensor '" + name + "' is not in the running model");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<ModelFiles>> OpenCheckpointBeneath(const ConfinedRoot& root, const std::string& dir,
                                                          const WeightLayout& expected) {
  const std::string name = root.path() + "/" + dir;
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::LoadHf(name, root.MapperFor(dir));
  if (!files.ok()) {
    // A truncated or corrupt file is the caller's bad input, not ours.
    if (files.status().code() == Code::kCorruption) return Status::InvalidArgument(files.status().message());
    return files.status();
  }
  FR_RETURN_IF_ERROR(expected.Check(**files));
  return files;
}

Result<std::unique_ptr<Model>> BuildCheckpoint(std::unique_ptr<ModelFiles> files) {
  files->Prefault();
  return Model::Build(std::move(files));
}

Result<std::unique_ptr<Model>> LoadCheckpointBeneath(const std::string& root, const std::string& dir,
                                                     const Model& running) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ConfinedRoot> confined, ConfinedRoot::Open(root));
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> files,
                      OpenCheckpointBeneath(*confined, dir, WeightLayout::Of(running)));
  return BuildCheckpoint(std::move(files));
}

}  // namespace flashroll::engine
