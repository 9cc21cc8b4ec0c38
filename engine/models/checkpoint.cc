#include "engine/models/checkpoint.h"

#include <cctype>
#include <functional>
#include <sstream>

#include "common/sha256.h"

namespace flashroll::engine {
namespace {

constexpr char kManifestFile[] = "manifest.json";

std::string Text(int64_t v) { return std::to_string(v); }
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}
std::string Text(const std::vector<int64_t>& v) { return ShapeString(v); }
std::string Text(const std::optional<int64_t>& v) { return v ? Text(*v) : "null"; }
std::string Text(const std::string& v) { return v; }
std::string Text(RopeScalingType v) {
  switch (v) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
  }
  return "unknown";
}

// The first config.json setting in which `got` differs from `want`, as
// {dotted key, "got is not want"}. Every setting a model family reads is
// here; hidden_act and sliding windows are not, because ParseHfConfig
// refuses all but silu and full attention.
std::optional<std::pair<std::string, std::string>> ConfigDifference(const ModelConfig& want, const ModelConfig& got) {
  std::optional<std::pair<std::string, std::string>> found;
  auto compare = [&](const char* key, const auto& a, const auto& b) {
    if (!found && !(a == b)) found.emplace(key, Text(b) + " is not " + Text(a));
  };
  compare("model_type", want.architecture, got.architecture);
  compare("vocab_size", want.vocab_size, got.vocab_size);
  compare("hidden_size", want.hidden_size, got.hidden_size);
  compare("intermediate_size", want.intermediate_size, got.intermediate_size);
  compare("num_hidden_layers", want.num_layers, got.num_layers);
  compare("num_attention_heads", want.num_heads, got.num_heads);
  compare("num_key_value_heads", want.num_kv_heads, got.num_kv_heads);
  compare("head_dim", want.head_dim, got.head_dim);
  compare("max_position_embeddings", want.max_position_embeddings, got.max_position_embeddings);
  compare("rms_norm_eps", want.rms_norm_eps, got.rms_norm_eps);
  compare("rope_theta", want.rope.theta, got.rope.theta);
  compare("rope_scaling.rope_type", want.rope.scaling, got.rope.scaling);
  compare("rope_scaling.factor", want.rope.factor, got.rope.factor);
  compare("rope_scaling.low_freq_factor", want.rope.low_freq_factor, got.rope.low_freq_factor);
  compare("rope_scaling.high_freq_factor", want.rope.high_freq_factor, got.rope.high_freq_factor);
  compare("rope_scaling.original_max_position_embeddings", want.rope.original_max_position_embeddings,
          got.rope.original_max_position_embeddings);
  compare("tie_word_embeddings", want.tie_word_embeddings, got.tie_word_embeddings);
  // Unset means the family's default; the bias tensors' presence is checked
  // with the tensors.
  if (want.attention_bias && got.attention_bias) compare("attention_bias", *want.attention_bias, *got.attention_bias);
  compare("num_experts", want.num_experts, got.num_experts);
  compare("num_experts_per_tok", want.num_experts_per_tok, got.num_experts_per_tok);
  compare("moe_intermediate_size", want.moe_intermediate_size, got.moe_intermediate_size);
  compare("shared_expert_intermediate_size", want.shared_expert_intermediate_size,
          got.shared_expert_intermediate_size);
  compare("decoder_sparse_step", want.decoder_sparse_step, got.decoder_sparse_step);
  compare("mlp_only_layers", want.mlp_only_layers, got.mlp_only_layers);
  compare("norm_topk_prob", want.norm_topk_prob, got.norm_topk_prob);
  compare("bos_token_id", want.bos_token_id, got.bos_token_id);
  compare("eos_token_id", want.eos_token_ids, got.eos_token_ids);
  return found;
}

Status Refuse(CheckpointProblem* problem, std::string param, std::string message) {
  if (problem != nullptr) problem->param = std::move(param);
  return Status::InvalidArgument(std::move(message));
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t TensorBytes(const WeightTensor& t) {
  Result<int64_t> bytes = kernels::RowBytes(t.dtype, NumElements(t.shape));
  return bytes.ok() ? *bytes : -1;
}

// Reads dir/manifest.json, if there is one, and checks it against the
// safetensors headers: the same tensor names, dtypes, shapes and sizes.
Result<std::optional<Manifest>> ReadManifest(const ConfinedRoot& root, const std::string& dir,
                                             const ModelFiles& files, CheckpointProblem* problem) {
  Result<std::unique_ptr<MappedFile>> mapped = root.MapperFor(dir)(kManifestFile);
  if (!mapped.ok() && mapped.status().code() == Code::kNotFound) return std::optional<Manifest>();
  if (!mapped.ok()) return mapped.status();
  const std::string path = files.path() + "/" + kManifestFile;
  Result<Json> json = ParseJson(
      std::string_view(reinterpret_cast<const char*>((*mapped)->data()), (*mapped)->size()), path);
  if (!json.ok()) return Status::InvalidArgument(json.status().message());
  const JsonView top(*json, path);
  FR_RETURN_IF_ERROR(top.ExpectOnlyKeys({"tensors"}));
  FR_ASSIGN_OR_RETURN(JsonView tensors, top.GetObject("tensors"));
  Manifest manifest;
  for (const auto& [name, value] : tensors.value().items()) {
    const JsonView entry(value, tensors.path() + "." + name);
    auto read = [&]() -> Status {
      FR_RETURN_IF_ERROR(entry.ExpectOnlyKeys({"dtype", "shape", "bytes", "sha256"}));
      ManifestEntry e;
      FR_ASSIGN_OR_RETURN(std::string dtype, entry.GetString("dtype"));
      e.dtype = Lower(dtype);
      FR_ASSIGN_OR_RETURN(std::vector<JsonView> dims, entry.GetArray("shape"));
      for (const JsonView& d : dims) {
        FR_ASSIGN_OR_RETURN(int64_t n, d.AsInt());
        e.shape.push_back(n);
      }
      FR_ASSIGN_OR_RETURN(e.bytes, entry.GetInt("bytes"));
      FR_ASSIGN_OR_RETURN(e.sha256, entry.GetString("sha256"));
      if (!IsSha256Hex(e.sha256)) return Status::InvalidArgument(entry.path() + ".sha256: not 64 lowercase hex digits");
      manifest.emplace(name, std::move(e));
      return Status::Ok();
    };
    Status read_entry = read();
    if (!read_entry.ok()) return Refuse(problem, name, read_entry.message());
  }
  for (const auto& [name, t] : files.tensors()) {
    auto it = manifest.find(name);
    if (it == manifest.end()) return Refuse(problem, name, path + ": tensor '" + name + "' is not listed");
    const ManifestEntry& e = it->second;
    const std::string got = t.file + ": tensor '" + name + "': ";
    if (e.dtype != kernels::DTypeName(t.dtype)) {
      return Refuse(problem, name, got + "dtype " + kernels::DTypeName(t.dtype) + " is not the manifest's " + e.dtype);
    }
    if (e.shape != t.shape) {
      return Refuse(problem, name, got + "shape " + ShapeString(t.shape) + " is not the manifest's " + ShapeString(e.shape));
    }
    if (e.bytes != TensorBytes(t)) {
      return Refuse(problem, name,
                    got + Text(TensorBytes(t)) + " bytes is not the manifest's " + Text(e.bytes));
    }
  }
  for (const auto& [name, e] : manifest) {
    if (files.tensors().count(name) == 0) {
      return Refuse(problem, name, path + ": tensor '" + name + "' is not in the checkpoint's weights");
    }
  }
  return std::optional<Manifest>(std::move(manifest));
}

// The key a parse error of dir's config files names, for `param`:
// "<dir>/config.json: hidden_act: 'gelu' is not supported" -> "hidden_act".
std::string ConfigKeyIn(const std::string& message, const std::string& dir) {
  for (const char* file : {"/config.json: ", "/generation_config.json: "}) {
    const std::string prefix = dir + file;
    if (message.compare(0, prefix.size(), prefix) != 0) continue;
    size_t begin = prefix.size(), end = begin;
    while (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_' ||
                                    message[end] == '.')) {
      ++end;
    }
    if (end == begin || end >= message.size() || message[end] != ':') return "";
    if (message[begin] == '.') ++begin;
    return message.substr(begin, end - begin);
  }
  return "";
}

Result<std::string> HashTensor(const WeightTensor& t) {
  Sha256 sha;
  sha.Update(t.data, static_cast<size_t>(TensorBytes(t)));
  return sha.HexDigest();
}

}  // namespace

WeightLayout WeightLayout::Of(const Model& model) { return Of(model.files()); }

WeightLayout WeightLayout::Of(const ModelFiles& files) {
  WeightLayout layout;
  layout.config_ = files.config();
  for (const auto& [name, t] : files.tensors()) layout.tensors_.emplace(name, Tensor{t.dtype, t.shape});
  return layout;
}

Status WeightLayout::Check(const ModelFiles& next, CheckpointProblem* problem) const {
  if (auto difference = ConfigDifference(config_, next.config())) {
    return Refuse(problem, difference->first, next.config_file() + ": " + difference->first + ": " + difference->second);
  }
  const auto& tensors = next.tensors();
  for (const auto& [name, want] : tensors_) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return Refuse(problem, name, next.path() + ": tensor '" + name + "' is missing");
    const WeightTensor& got = it->second;
    if (got.shape != want.shape) {
      return Refuse(problem, name,
                    got.file + ": tensor '" + name + "': shape " + ShapeString(got.shape) + " is not " +
                        ShapeString(want.shape));
    }
    if (got.dtype != want.dtype) {
      return Refuse(problem, name,
                    got.file + ": tensor '" + name + "': dtype " + kernels::DTypeName(got.dtype) + " is not " +
                        kernels::DTypeName(want.dtype));
    }
  }
  for (const auto& [name, got] : tensors) {
    if (tensors_.count(name) == 0) {
      return Refuse(problem, name, got.file + ": tensor '" + name + "' is not in the running model");
    }
  }
  return Status::Ok();
}

Result<OpenedCheckpoint> OpenCheckpointBeneath(const ConfinedRoot& root, const std::string& dir,
                                               const WeightLayout& expected, CheckpointProblem* problem) {
  const std::string name = root.path() + "/" + dir;
  Result<std::unique_ptr<ModelFiles>> files = ModelFiles::LoadHf(name, root.MapperFor(dir));
  if (!files.ok()) {
    // A truncated or corrupt file is the caller's bad input, not ours; so is
    // a setting the engine lacks: the running model cannot have it.
    const Code code = files.status().code();
    if (code != Code::kCorruption && code != Code::kUnimplemented && code != Code::kInvalidArgument) {
      return files.status();
    }
    if (problem != nullptr) problem->param = ConfigKeyIn(files.status().message(), name);
    return Status::InvalidArgument(files.status().message());
  }
  FR_RETURN_IF_ERROR(expected.Check(**files, problem));
  FR_ASSIGN_OR_RETURN(std::optional<Manifest> manifest, ReadManifest(root, dir, **files, problem));
  return OpenedCheckpoint{std::move(files).value(), std::move(manifest)};
}

Result<std::unique_ptr<Model>> BuildCheckpoint(OpenedCheckpoint checkpoint) {
  checkpoint.files->Prefault();
  if (checkpoint.manifest) {
    for (const auto& [name, entry] : *checkpoint.manifest) {
      const WeightTensor& t = checkpoint.files->tensors().at(name);
      FR_ASSIGN_OR_RETURN(std::string digest, HashTensor(t));
      if (digest != entry.sha256) {
        return Status::InvalidArgument(t.file + ": tensor '" + name + "': its bytes' sha256 " + digest +
                                       " is not the manifest's " + entry.sha256);
      }
    }
  }
  return Model::Build(std::move(checkpoint.files));
}

Result<std::unique_ptr<Model>> LoadCheckpointBeneath(const std::string& root, const std::string& dir,
                                                     const Model& running) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ConfinedRoot> confined, ConfinedRoot::Open(root));
  FR_ASSIGN_OR_RETURN(OpenedCheckpoint opened, OpenCheckpointBeneath(*confined, dir, WeightLayout::Of(running)));
  return BuildCheckpoint(std::move(opened));
}

Result<Json> ManifestJson(const ModelFiles& files) {
  Json tensors = Json::object();
  for (const auto& [name, t] : files.tensors()) {
    FR_ASSIGN_OR_RETURN(std::string digest, HashTensor(t));
    std::string dtype = kernels::DTypeName(t.dtype);
    for (char& c : dtype) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    tensors[name] = Json{{"dtype", dtype}, {"shape", t.shape}, {"bytes", TensorBytes(t)}, {"sha256", digest}};
  }
  return Json{{"tensors", std::move(tensors)}};
}

}  // namespace flashroll::engine
