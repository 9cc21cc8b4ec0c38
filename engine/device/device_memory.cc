#include "engine/device/device_memory.h"

#include <cstdio>
#include <map>

#include "engine/kernels/dtype.h"

namespace flashroll::engine {
namespace {

// The matrix a weight is uploaded into: q/k/v share one, gate/up another;
// a MoE layer's experts share one for their gate/up and one for their down
// projections ("experts.E." drops its E).
std::string StackOf(std::string name) {
  if (const size_t at = name.find(".experts."); at != std::string::npos) {
    const size_t begin = at + std::string(".experts.").size();
    const size_t end = name.find('.', begin);
    if (end != std::string::npos) name.erase(begin, end + 1 - begin);
  }
  for (const auto& [part, stack] : {std::pair{"q_proj.", "qkv."}, {"k_proj.", "qkv."}, {"v_proj.", "qkv."},
                                    {"gate_proj.", "gate_up."}, {"up_proj.", "gate_up."}}) {
    const size_t at = name.find(part);
    if (at != std::string::npos) return name.substr(0, at) + stack + name.substr(at + std::string(part).size());
  }
  return name;
}

}  // namespace

int64_t CudaWeightBytes(const ModelFiles& files) {
  struct Stack {
    int64_t elements = 0;
    bool bf16 = true;
  };
  std::map<std::string, Stack> matrices;
  int64_t total = 0;
  for (const auto& [name, t] : files.tensors()) {
    // GGUF's rope_freqs is folded into the RoPE tables, never uploaded.
    if (name == "rope_freqs.weight") continue;
    if (name == "lm_head.weight" && files.config().tie_word_embeddings) continue;
    // Norms, biases and a shared expert's gate ([1, hidden]): f32 vectors.
    if (t.shape.size() <= 1 || (t.shape.size() == 2 && t.shape[0] == 1)) {
      total += NumElements(t.shape) * static_cast<int64_t>(sizeof(float));
      continue;
    }
    Stack& stack = matrices[StackOf(name)];
    stack.elements += NumElements(t.shape);
    stack.bf16 = stack.bf16 && t.dtype == kernels::DType::kBF16;
  }
  for (const auto& [name, stack] : matrices) total += stack.elements * (stack.bf16 ? 2 : 4);
  return total;
}

Result<int64_t> CudaWeightBytes(const std::string& path) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> files, ModelFiles::Load(path));
  return CudaWeightBytes(*files);
}

int64_t DeviceWeightBytes(const DeviceSpec& device, const std::string& path) {
  if (!device.is_cuda()) return 0;
  Result<int64_t> bytes = CudaWeightBytes(path);
  return bytes.ok() ? *bytes : 0;
}

int64_t DeviceWeightBytes(const DeviceSpec& device, const ModelFiles& files) {
  return device.is_cuda() ? CudaWeightBytes(files) : 0;
}

KvLayout KvLayoutOf(const ModelConfig& config, int64_t block_size, KvDType dtype) {
  return KvLayout{config.num_layers, config.num_kv_heads, config.head_dim, block_size, dtype};
}

int64_t KvPoolBytes(const ModelConfig& config, int64_t kv_memory_bytes, int64_t block_size, KvDType dtype) {
  const int64_t block = KvLayoutOf(config, block_size, dtype).BlockBytes();
  return block > 0 ? kv_memory_bytes / block * block : 0;
}

int64_t KvPoolBytesFor(const ModelConfig& config, int64_t context, int64_t batch, int64_t block_size,
                       KvDType dtype) {
  const int64_t blocks_per_sequence = (context + block_size - 1) / block_size;
  return batch * blocks_per_sequence * KvLayoutOf(config, block_size, dtype).BlockBytes();
}

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), value == static_cast<int64_t>(value) ? "%.0f %s" : "%.1f %s", value,
                kUnits[unit]);
  return text;
}

}  // namespace flashroll::engine
