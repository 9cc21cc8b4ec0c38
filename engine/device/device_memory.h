// DeviceMemory: the GPU memory a model needs on the CUDA backend, computed
// from its tensor index alone (safetensors headers or the GGUF directory; no
// tensor bytes are read), so CheckDevice can refuse a model before any
// weights load and `flashroll model-info` can print it.
//
// The file size on disk undercounts: the CUDA backend keeps bf16 matrices as
// bf16 but expands every other type (f16, q8_0, q4_K, ...) to f32, stores
// norms, biases and a shared expert's [1, hidden] gate as f32, and stacks
// q/k/v and gate/up into one matrix each, and a MoE layer's experts into one
// gate/up and one down matrix (f32 unless every part is bf16); see
// engine/cuda/device_weights.h. The GPU test CudaWeightBytesTest checks
// these bytes against the upload's own.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/device/device.h"
#include "engine/format/model_loader.h"
#include "engine/models/paged_kv_storage.h"

namespace flashroll::engine {

// Bytes the weights in `files` take on the CUDA backend under its upload
// rule (DeviceWeights::Upload): a tied lm_head is not stored twice.
int64_t CudaWeightBytes(const ModelFiles& files);

// The same for the model at `path` (a Hugging Face directory or a .gguf
// file); the loader's errors (naming the file) when its index cannot be read.
Result<int64_t> CudaWeightBytes(const std::string& path);

// The weight bytes to ask CheckDevice for before the model at `path` loads
// on `device`: CudaWeightBytes on a GPU; 0 on the CPU (nothing to check,
// so the index is not read) and when the index cannot be read (loading then
// reports what is wrong).
int64_t DeviceWeightBytes(const DeviceSpec& device, const std::string& path);
// The same for weights already loaded from `files`.
int64_t DeviceWeightBytes(const DeviceSpec& device, const ModelFiles& files);

// The KV pool the engine allocates for `config`: `kv_memory_bytes` rounded
// down to whole blocks of `block_size` tokens.
int64_t KvPoolBytes(const ModelConfig& config, int64_t kv_memory_bytes, int64_t block_size = 16,
                    KvDType dtype = KvDType::kBF16);

// The KV pool that holds `batch` sequences of `context` tokens each, every
// sequence in whole blocks.
int64_t KvPoolBytesFor(const ModelConfig& config, int64_t context, int64_t batch, int64_t block_size = 16,
                       KvDType dtype = KvDType::kBF16);

// The KvLayout the engine uses for `config`.
KvLayout KvLayoutOf(const ModelConfig& config, int64_t block_size = 16, KvDType dtype = KvDType::kBF16);

// "16.4 GiB", "144 KiB", "512 B": binary units, one decimal above KiB.
std::string HumanBytes(int64_t bytes);

}  // namespace flashroll::engine
