#include "engine/format/model_loader.h"

#include <sys/stat.h>

#include <cstring>

#include "common/json.h"
#include "engine/models/architecture.h"

namespace flashroll::engine {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

size_t ElementBytes(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32:
      return 4;
    case kernels::DType::kF16:
    case kernels::DType::kBF16:
    case kernels::DType::kQ8_0:
    case kernels::DType::kQ4_0:
      return 2;  // quantised blocks start with an fp16 scale
  }
  return 1;
}

Result<kernels::DType> FromGgml(GgmlType type, const std::string& tensor, const std::string& file) {
  switch (type) {
    case GgmlType::kF32:
      return kernels::DType::kF32;
    case GgmlType::kF16:
      return kernels::DType::kF16;
    case GgmlType::kBF16:
      return kernels::DType::kBF16;
    case GgmlType::kQ8_0:
      return kernels::DType::kQ8_0;
    case GgmlType::kQ4_0:
      return kernels::DType::kQ4_0;
    default:
      break;
  }
  const GgmlTypeTraits* traits = FindGgmlTypeTraits(static_cast<uint32_t>(type));
  return Status::Unimplemented(file + ": tensor '" + tensor + "': ggml type " +
                               (traits ? traits->name : "?") +
                               " is not supported (F32, F16, BF16, Q8_0, Q4_0 are)");
}

// GGUF per-block tensor suffixes and their Hugging Face names.
struct NameMap {
  const char* gguf;
  const char* hf;
};
constexpr NameMap kBlockNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    // Stacked experts, split per expert by the loader.
    {"ffn_gate_exps.weight", "mlp.experts.gate_proj"},
    {"ffn_up_exps.weight", "mlp.experts.up_proj"},
    {"ffn_down_exps.weight", "mlp.experts.down_proj"},
};
constexpr NameMap kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"rope_freqs.weight", "rope_freqs.weight"},
};

// The Hugging Face name of a GGUF tensor, or "" when it is not one the engine uses.
std::string HfName(const std::string& gguf) {
  for (const NameMap& m : kGlobalNames) {
    if (gguf == m.gguf) return m.hf;
  }
  if (gguf.rfind("blk.", 0) != 0) return "";
  const size_t dot = gguf.find('.', 4);
  if (dot == std::string::npos || dot == 4) return "";
  const std::string layer = gguf.substr(4, dot - 4);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return "";
  const std::string suffix = gguf.substr(dot + 1);
  for (const NameMap& m : kBlockNames) {
    if (suffix == m.gguf) return "model.layers." + layer + "." + m.hf;
  }
  return "";
}

}  // namespace

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Result<std::unique_ptr<ModelFiles>> ModelFiles::Load(const std::string& path) {
  std::unique_ptr<ModelFiles> files(new ModelFiles());
  files->path_ = path;
  if (IsDirectory(path)) {
    FR_RETURN_IF_ERROR(files->LoadHfDirectory(path, MapFilesIn(path)));
  } else if (FileExists(path)) {
    FR_RETURN_IF_ERROR(files->LoadGguf(path));
  } else {
    return Status::NotFound(path + ": no such model directory or GGUF file");
  }
  return files;
}

Result<std::unique_ptr<ModelFiles>> ModelFiles::LoadHf(const std::string& dir, const DirectoryFileMapper& map) {
  std::unique_ptr<ModelFiles> files(new ModelFiles());
  files->path_ = dir;
  FR_RETURN_IF_ERROR(files->LoadHfDirectory(dir, map));
  return files;
}

void ModelFiles::Prefault() const {
  for (const auto& file : safetensors_) file->mapping().Prefault();
  if (gguf_) gguf_->mapping().Prefault();
}

const WeightTensor* ModelFiles::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<const WeightTensor*> ModelFiles::Get(const std::string& name,
                                            const std::vector<int64_t>& shape) const {
  const WeightTensor* t = Find(name);
  if (auto it = unsupported_.find(name); t == nullptr && it != unsupported_.end()) {
    return Status::Unimplemented(it->second);
  }
  if (t == nullptr) return Status::InvalidArgument(path_ + ": tensor '" + name + "' is missing");
  // A [1, n] or [n, 1] tensor and its 1-D form hold the same values; GGUF drops the unit dims.
  if (t->shape != shape && NumElements(t->shape) == NumElements(shape) &&
      (t->shape.size() == 1 || shape.size() == 1)) {
    return t;
  }
  if (t->shape != shape) {
    return Status::InvalidArgument(t->file + ": tensor '" + name + "': shape " + ShapeString(t->shape) +
                                   " does not match the config's " + ShapeString(shape));
  }
  return t;
}

uint8_t* ModelFiles::Allocate(size_t bytes) {
  owned_.push_back(std::make_unique<uint8_t[]>(bytes == 0 ? 1 : bytes));
  return owned_.back().get();
}

const uint8_t* ModelFiles::Own(const uint8_t* data, size_t bytes) {
  uint8_t* copy = Allocate(bytes);
  std::memcpy(copy, data, bytes);
  return copy;
}

Status ModelFiles::AddTensor(const std::string& name, WeightTensor tensor) {
  if (reinterpret_cast<uintptr_t>(tensor.data) % ElementBytes(tensor.dtype) != 0) {
    FR_ASSIGN_OR_RETURN(int64_t row_bytes,
                        kernels::RowBytes(tensor.dtype, tensor.shape.empty() ? 1 : tensor.shape.back()));
    const int64_t rows = tensor.shape.empty() ? 1 : NumElements(tensor.shape) / tensor.shape.back();
    tensor.data = Own(tensor.data, static_cast<size_t>(rows * row_bytes));
  }
  if (!tensors_.emplace(name, std::move(tensor)).second) {
    return Status::InvalidArgument(path_ + ": tensor '" + name + "' appears twice");
  }
  return Status::Ok();
}

Status ModelFiles::AddSafetensors(std::unique_ptr<SafetensorsFile> file) {
  const int64_t experts = config_.num_experts;
  const int64_t f = config_.moe_intermediate_size;
  for (const SafetensorsTensor& t : file->tensors()) {
    if (!t.dtype) {
      // Reported by Get() if a model asks for it; files may carry integer buffers no model reads.
      unsupported_[t.name] = file->path() + ": tensor '" + t.name + "': dtype " + t.dtype_name +
                             " is not supported (F32, F16, BF16 are)";
      continue;
    }
    WeightTensor w{*t.dtype, t.shape, t.data, file->path()};
    // transformers 5 stacks experts: gate_up_proj [E, 2F, D] (gate rows
    // first) and down_proj [E, D, F]. Expose them as per-expert views.
    const bool gate_up = t.name.ends_with(".experts.gate_up_proj");
    const bool down = t.name.ends_with(".experts.down_proj");
    if (gate_up || down) {
      const std::string prefix = t.name.substr(0, t.name.size() - (gate_up ? 12 : 9));
      const int64_t d = config_.hidden_size;
      const std::vector<int64_t> want =
          gate_up ? std::vector<int64_t>{experts, 2 * f, d} : std::vector<int64_t>{experts, d, f};
      if (t.shape != want) {
        return Status::InvalidArgument(file->path() + ": tensor '" + t.name + "': shape " +
                                       ShapeString(t.shape) + " does not match the config's " +
                                       ShapeString(want));
      }
      const size_t elem = ElementBytes(*t.dtype);
      const size_t expert_bytes = static_cast<size_t>(2 * f * d) * elem;
      for (int64_t e = 0; e < experts; ++e) {
        const std::string base = prefix + std::to_string(e) + ".";
        if (gate_up) {
          const uint8_t* p = t.data + static_cast<size_t>(e) * expert_bytes;
          FR_RETURN_IF_ERROR(AddTensor(base + "gate_proj.weight", {*t.dtype, {f, d}, p, file->path()}));
          FR_RETURN_IF_ERROR(AddTensor(base + "up_proj.weight",
                                       {*t.dtype, {f, d}, p + expert_bytes / 2, file->path()}));
        } else {
          const uint8_t* p = t.data + static_cast<size_t>(e * d * f) * elem;
          FR_RETURN_IF_ERROR(AddTensor(base + "down_proj.weight", {*t.dtype, {d, f}, p, file->path()}));
        }
      }
      continue;
    }
    FR_RETURN_IF_ERROR(AddTensor(t.name, std::move(w)));
  }
  safetensors_.push_back(std::move(file));
  return Status::Ok();
}

Status ModelFiles::LoadHfDirectory(const std::string& dir, const DirectoryFileMapper& map) {
  format_ = "safetensors";
  config_file_ = dir + "/config.json";
  FR_ASSIGN_OR_RETURN(config_, ReadHfConfig(dir, map));
  const std::string index_path = dir + "/model.safetensors.index.json";
  Result<std::unique_ptr<MappedFile>> index_file = map("model.safetensors.index.json");
  if (!index_file.ok() && index_file.status().code() != Code::kNotFound) return index_file.status();
  if (index_file.ok()) {
    const MappedFile& f = **index_file;
    FR_ASSIGN_OR_RETURN(Json index,
                        ParseJson(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()), index_path));
    JsonView root(index, "");
    Result<JsonView> weight_map = root.GetObject("weight_map");
    if (!weight_map.ok()) return weight_map.status().Wrap(index_path);
    std::map<std::string, std::vector<std::string>> shards;  // shard -> tensors it must hold
    for (const auto& [name, shard] : weight_map->value().items()) {
      if (!shard.is_string()) {
        return Status::InvalidArgument(index_path + ": weight_map." + name + ": expected a file name");
      }
      const std::string file = shard.get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file[0] == '.') {
        return Status::InvalidArgument(index_path + ": weight_map." + name + ": bad shard name '" + file + "'");
      }
      shards[file].push_back(name);
    }
    for (const auto& [shard, names] : shards) {
      FR_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, map(shard));
      FR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(std::move(mapped)));
      for (const std::string& name : names) {
        if (file->Find(name) == nullptr) {
          return Status::Corruption(file->path() + ": tensor '" + name + "' is listed in " + index_path +
                                    " but missing from the shard");
        }
      }
      FR_RETURN_IF_ERROR(AddSafetensors(std::move(file)));
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<MappedFile>> single = map("model.safetensors");
  if (!single.ok() && single.status().code() == Code::kNotFound) {
    return Status::NotFound(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  if (!single.ok()) return single.status();
  FR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(std::move(single).value()));
  return AddSafetensors(std::move(file));
}

Status ModelFiles::LoadGguf(const std::string& file) {
  format_ = "gguf";
  config_file_ = file;
  FR_ASSIGN_OR_RETURN(gguf_, GgufFile::Open(file));
  const GgufFile& g = *gguf_;
  FR_ASSIGN_OR_RETURN(std::string_view arch_name, g.GetString("general.architecture"));
  const Architecture* arch = FindGgufArchitecture(arch_name);
  if (arch == nullptr) {
    return Status::InvalidArgument(file + ": general.architecture: unknown architecture '" +
                                   std::string(arch_name) + "' (supported: " + ArchitectureNames() + ")");
  }
  const std::string p = std::string(arch_name) + ".";
  auto get_int = [&](const std::string& key, int64_t fallback) -> Result<int64_t> {
    if (!g.Has(key)) return fallback;
    return g.GetInt(key);
  };
  auto get_float = [&](const std::string& key, double fallback) -> Result<double> {
    if (!g.Has(key)) return fallback;
    return g.GetFloat(key);
  };
  ModelConfig& c = config_;
  c.architecture = arch->model_type;
  FR_ASSIGN_OR_RETURN(c.hidden_size, g.GetInt(p + "embedding_length"));
  FR_ASSIGN_OR_RETURN(c.num_layers, g.GetInt(p + "block_count"));
  FR_ASSIGN_OR_RETURN(c.num_heads, g.GetInt(p + "attention.head_count"));
  FR_ASSIGN_OR_RETURN(c.num_kv_heads, get_int(p + "attention.head_count_kv", c.num_heads));
  if (c.num_heads <= 0) return Status::InvalidArgument(file + ": " + p + "attention.head_count: must be positive");
  FR_ASSIGN_OR_RETURN(c.head_dim, get_int(p + "attention.key_length", c.hidden_size / c.num_heads));
  FR_ASSIGN_OR_RETURN(c.intermediate_size, get_int(p + "feed_forward_length", 0));
  FR_ASSIGN_OR_RETURN(c.max_position_embeddings, get_int(p + "context_length", 0));
  FR_ASSIGN_OR_RETURN(c.rms_norm_eps, get_float(p + "attention.layer_norm_rms_epsilon", 1e-6));
  FR_ASSIGN_OR_RETURN(c.rope.theta, get_float(p + "rope.freq_base", 10000.0));
  if (g.Has(p + "rope.scaling.type")) {
    FR_ASSIGN_OR_RETURN(std::string_view type, g.GetString(p + "rope.scaling.type"));
    if (type == "linear") {
      c.rope.scaling = RopeScalingType::kLinear;
      FR_ASSIGN_OR_RETURN(c.rope.factor, g.GetFloat(p + "rope.scaling.factor"));
    } else if (type != "none") {
      return Status::Unimplemented(file + ": " + p + "rope.scaling.type: '" + std::string(type) +
                                   "' is not supported (none, linear are)");
    }
  }
  FR_ASSIGN_OR_RETURN(c.num_experts, get_int(p + "expert_count", 0));
  FR_ASSIGN_OR_RETURN(c.num_experts_per_tok, get_int(p + "expert_used_count", 0));
  FR_ASSIGN_OR_RETURN(c.moe_intermediate_size, get_int(p + "expert_feed_forward_length", 0));
  FR_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size, get_int(p + "expert_shared_feed_forward_length", 0));
  c.norm_topk_prob = arch->gguf_norm_topk_prob;
  if (g.Has(p + "expert_weights_norm")) {
    FR_ASSIGN_OR_RETURN(c.norm_topk_prob, g.GetBool(p + "expert_weights_norm"));
  }
  if (g.Has("tokenizer.ggml.bos_token_id")) {
    FR_ASSIGN_OR_RETURN(int64_t bos, g.GetInt("tokenizer.ggml.bos_token_id"));
    c.bos_token_id = bos;
  }
  if (g.Has("tokenizer.ggml.eos_token_id")) {
    FR_ASSIGN_OR_RETURN(int64_t eos, g.GetInt("tokenizer.ggml.eos_token_id"));
    c.eos_token_ids = {eos};
  }
  const GgufTensor* embd = g.FindTensor("token_embd.weight");
  if (embd == nullptr) return Status::InvalidArgument(file + ": tensor 'token_embd.weight' is missing");
  if (g.Has(p + "vocab_size")) {
    FR_ASSIGN_OR_RETURN(c.vocab_size, g.GetInt(p + "vocab_size"));
  } else if (embd->dims.size() == 2) {
    c.vocab_size = embd->dims[1];
  }
  c.tie_word_embeddings = g.FindTensor("output.weight") == nullptr;
  if (const GgufTensor* q = g.FindTensor("blk.0.attn_q.weight")) {
    c.dtype = FindGgmlTypeTraits(static_cast<uint32_t>(q->type))->name;
  }
  FR_RETURN_IF_ERROR(ValidateModelConfig(c, file));

  for (const GgufTensor& t : g.tensors()) {
    const std::string name = HfName(t.name);
    if (name.empty()) continue;
    FR_ASSIGN_OR_RETURN(kernels::DType dtype, FromGgml(t.type, t.name, file));
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    // Stacked experts [E, rows, cols]: one view per expert, rows * cols apart.
    if (name.ends_with("mlp.experts.gate_proj") || name.ends_with("mlp.experts.up_proj") ||
        name.ends_with("mlp.experts.down_proj")) {
      if (shape.size() != 3 || shape[0] != c.num_experts) {
        return Status::InvalidArgument(file + ": tensor '" + t.name + "': shape " + ShapeString(shape) +
                                       " is not [expert_count=" + std::to_string(c.num_experts) +
                                       ", rows, cols]");
      }
      FR_ASSIGN_OR_RETURN(int64_t row_bytes, kernels::RowBytes(dtype, shape[2]));
      const size_t dot = name.rfind('.');
      for (int64_t e = 0; e < shape[0]; ++e) {
        const std::string expert = name.substr(0, dot) + "." + std::to_string(e) + name.substr(dot) + ".weight";
        const uint8_t* data = t.data + static_cast<size_t>(e * shape[1] * row_bytes);
        FR_RETURN_IF_ERROR(AddTensor(expert, {dtype, {shape[1], shape[2]}, data, file}));
      }
      continue;
    }
    WeightTensor w{dtype, shape, t.data, file};
    const bool q = name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.q_proj.bias");
    const bool k = name.ends_with("self_attn.k_proj.weight") || name.ends_with("self_attn.k_proj.bias");
    if (arch->gguf_permuted_qk && (q || k)) {
      // llama.cpp's converter reorders each head's rows from [first half;
      // second half] to interleaved pairs: HF row (half * hd/2 + i) is GGUF
      // row (2 * i + half). Put the rows back.
      const int64_t heads = q ? c.num_heads : c.num_kv_heads;
      const int64_t rows = shape.empty() ? 0 : shape[0];
      const int64_t cols = shape.size() == 2 ? shape[1] : 1;
      if (rows != heads * c.head_dim) {
        return Status::InvalidArgument(file + ": tensor '" + t.name + "': shape " + ShapeString(shape) +
                                       " does not match the config's " +
                                       std::to_string(heads * c.head_dim) + " rows");
      }
      FR_ASSIGN_OR_RETURN(int64_t row_bytes, kernels::RowBytes(dtype, cols));
      uint8_t* out = Allocate(static_cast<size_t>(rows * row_bytes));
      const int64_t hd = c.head_dim;
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t half = 0; half < 2; ++half) {
          for (int64_t i = 0; i < hd / 2; ++i) {
            const int64_t hf_row = h * hd + half * (hd / 2) + i;
            const int64_t gguf_row = h * hd + 2 * i + half;
            std::memcpy(out + hf_row * row_bytes, t.data + gguf_row * row_bytes, static_cast<size_t>(row_bytes));
          }
        }
      }
      w.data = out;
    }
    FR_RETURN_IF_ERROR(AddTensor(name, std::move(w)));
  }
  return Status::Ok();
}

}  // namespace flashroll::engine
