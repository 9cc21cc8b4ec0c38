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

namespace {

// Visits, in the order of the token-major layout, every run of a sequence's
// tokens that one (layer, keys or values, kv_head, block) holds contiguously:
// fn(pointer into the block, offset in the flat buffer, bytes).
template <typename Base, typename Fn>
void ForEachRun(const KvLayout& layout, std::span<const int32_t> blocks, int64_t tokens, Base base, Fn fn) {
  const int64_t row = layout.head_dim * layout.ElementBytes();  // one token of one head
  const int64_t half = layout.HalfBlockBytes();
  int64_t offset = 0;
  for (int64_t l = 0; l < layout.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      auto* layer = base(l, kv);
      for (int64_t h = 0; h < layout.num_kv_heads; ++h) {
        for (int64_t t = 0; t < tokens; t += layout.block_size) {
          const int64_t n = std::min(layout.block_size, tokens - t);
          auto* block = layer + blocks[static_cast<size_t>(t / layout.block_size)] * half;
          fn(block + h * layout.block_size * row, offset, n * row);
          offset += n * row;
        }
      }
    }
  }
}

}  // namespace

void PagedKvStorage::ExportTokens(std::span<const int32_t> blocks, int64_t tokens, uint8_t* out) const {
  ForEachRun(layout_, blocks, tokens, [this](int64_t l, int kv) { return kv == 0 ? KeyBase(l) : ValueBase(l); },
             [out](const uint8_t* src, int64_t offset, int64_t bytes) {
               std::memcpy(out + offset, src, static_cast<size_t>(bytes));
             });
}

void PagedKvStorage::ImportTokens(std::span<const int32_t> blocks, int64_t tokens, const uint8_t* in) {
  ForEachRun(layout_, blocks, tokens, [this](int64_t l, int kv) { return kv == 0 ? KeyBase(l) : ValueBase(l); },
             [in](uint8_t* dst, int64_t offset, int64_t bytes) {
               std::memcpy(dst, in + offset, static_cast<size_t>(bytes));
             });
}

}  // namespace flashroll::engine
