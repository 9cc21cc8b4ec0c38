#include "engine/models/paged_kv_storage.h"

#include <algorithm>
#include <cstring>

namespace flashroll::engine {

Result<KvDType> ParseKvDType(const std::string& name) {
  if (name == "f32") return KvDType::kF32;
  if (name == "bf16") return KvDType::kBF16;
  return Status::InvalidArgument("KV dtype '" + name + "' is not one of f32, bf16");
}

const char* KvDTypeName(KvDType dtype) { return dtype == KvDType::kF32 ? "f32" : "bf16"; }

void PagedKvStorage::Resize(int64_t num_blocks) {
  const size_t bytes = static_cast<size_t>(num_blocks * layout_.HalfBlockBytes());
  const size_t kept = static_cast<size_t>(std::min(num_blocks, num_blocks_) * layout_.HalfBlockBytes());
  for (auto* arrays : {&keys_, &values_}) {
    for (auto& old : *arrays) {
      std::unique_ptr<uint8_t[]> fresh(new uint8_t[bytes]);
      if (kept > 0) std::memcpy(fresh.get(), old.get(), kept);
      old = std::move(fresh);
    }
  }
  num_blocks_ = num_blocks;
}

void PagedKvStorage::CopyBlock(int32_t from, int32_t to) {
  const int64_t half = layout_.HalfBlockBytes();
  for (int64_t l = 0; l < layout_.num_layers; ++l) {
    std::memcpy(keys_[l].get() + to * half, keys_[l].get() + from * half, static_cast<size_t>(half));
    std::memcpy(values_[l].get() + to * half, values_[l].get() + from * half, static_cast<size_t>(half));
  }
}

}  // namespace flashroll::engine
