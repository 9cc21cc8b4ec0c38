// ModelFiles: the hyperparameters and weight tensors of a model, loaded from
// a Hugging Face directory (config.json, generation_config.json, one
// model.safetensors or shards listed in model.safetensors.index.json) or
// from a single GGUF file.
//
// Tensors are exposed under Hugging Face names in PyTorch shape order
// ([out, in] for a linear weight), whatever the source format, so model
// code is written once. Weights stay in the memory-mapped files: a tensor's
// data points into a mapping. Copies are made only where the format forces
// them: data not aligned to its element size, and the rows of llama's Q/K
// projections in GGUF (llama.cpp stores them in Meta's interleaved RoPE
// order; they are put back into Hugging Face's half-split order). Stacked
// expert tensors (GGUF's ffn_*_exps, transformers 5's experts.gate_up_proj)
// are exposed as per-expert views without copying.
//
// GGUF metadata becomes the same ModelConfig as config.json: the GGUF
// architecture name is mapped to the Hugging Face model_type by the model
// family registry (engine/models/architecture.h).
//
// Thread safety: immutable after loading; const methods may be called from
// any number of threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/format/gguf.h"
#include "engine/format/hf_config.h"
#include "engine/format/safetensors.h"
#include "engine/kernels/dtype.h"

namespace flashroll::engine {

struct WeightTensor {
  kernels::DType dtype = kernels::DType::kF32;
  std::vector<int64_t> shape;  // PyTorch order
  const uint8_t* data = nullptr;
  std::string file;            // the file it came from, for error messages
};

class ModelFiles {
 public:
  // Loads `path`: a directory holding a Hugging Face model, or a .gguf file.
  // Errors name the file and the key or tensor: a missing or malformed
  // config key, a truncated or corrupt file, a tensor of an unsupported
  // dtype, an index that names a missing shard. The architecture is checked
  // later, by the model family registry.
  static Result<std::unique_ptr<ModelFiles>> Load(const std::string& path);
  // Loads a Hugging Face directory whose files `map` opens by name (`dir`
  // names them in errors), with the same errors as Load. Only the
  // safetensors headers are read: tensor data stays unread in the mappings
  // until used (or Prefault()).
  static Result<std::unique_ptr<ModelFiles>> LoadHf(const std::string& dir, const DirectoryFileMapper& map);

  ModelFiles(const ModelFiles&) = delete;
  ModelFiles& operator=(const ModelFiles&) = delete;

  const ModelConfig& config() const { return config_; }
  const std::string& path() const { return path_; }
  // "safetensors" or "gguf".
  const std::string& format() const { return format_; }
  // The file that describes the model: config.json or the .gguf file.
  const std::string& config_file() const { return config_file_; }
  const std::map<std::string, WeightTensor>& tensors() const { return tensors_; }
  // The parsed GGUF file (for its tokenizer metadata), or nullptr for a HF directory.
  const GgufFile* gguf() const { return gguf_.get(); }

  // Reads every mapped weight file into memory now (MappedFile::Prefault).
  void Prefault() const;

  // The tensor `name`, or nullptr.
  const WeightTensor* Find(const std::string& name) const;

  // The tensor `name` with exactly `shape`. Returns kInvalidArgument
  // "<file>: tensor 'name': shape [a, b] does not match the config's [c, d]"
  // or "<path>: tensor 'name' is missing".
  Result<const WeightTensor*> Get(const std::string& name, const std::vector<int64_t>& shape) const;

 private:
  ModelFiles() = default;
  Status LoadHfDirectory(const std::string& dir, const DirectoryFileMapper& map);
  Status LoadGguf(const std::string& file);
  Status AddSafetensors(std::unique_ptr<SafetensorsFile> file);
  Status AddTensor(const std::string& name, WeightTensor tensor);
  // Copies `bytes` bytes into storage owned by this object.
  const uint8_t* Own(const uint8_t* data, size_t bytes);
  uint8_t* Allocate(size_t bytes);

  ModelConfig config_;
  std::string path_;
  std::string format_;
  std::string config_file_;
  std::map<std::string, WeightTensor> tensors_;
  std::map<std::string, std::string> unsupported_;  // tensor name -> the error Get() returns
  std::vector<std::unique_ptr<SafetensorsFile>> safetensors_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
};

// Element count of a shape (1 for a scalar).
int64_t NumElements(const std::vector<int64_t>& shape);

// "[a, b, c]".
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace flashroll::engine
