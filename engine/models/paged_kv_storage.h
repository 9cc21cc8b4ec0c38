// PagedKvStorage: the memory of a paged KV cache — a pool of fixed-size
// blocks, each holding block_size tokens' keys and values for every layer.
//
// Layer l keeps its own array of blocks; within a block, keys are laid out
// [kv_head][token][head_dim] (and values the same), so the attention kernel
// reads one KV head's keys for a block contiguously. Which block belongs to
// which sequence is the block manager's business (serving/block_manager.h);
// this class only stores and copies. Keys are stored after RoPE.
//
// Thread safety: none for Resize/CopyBlock; distinct blocks may be written
// from distinct threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll::engine {

enum class KvDType { kF32, kBF16 };
// "f32" / "bf16"; InvalidArgument naming the accepted values otherwise.
Result<KvDType> ParseKvDType(const std::string& name);
const char* KvDTypeName(KvDType dtype);

struct KvLayout {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  KvDType dtype = KvDType::kF32;

  int64_t ElementBytes() const { return dtype == KvDType::kF32 ? 4 : 2; }
  // Bytes of one block's keys (or values) in one layer.
  int64_t HalfBlockBytes() const { return num_kv_heads * block_size * head_dim * ElementBytes(); }
  // Bytes of one block over all layers, keys and values.
  int64_t BlockBytes() const { return 2 * num_layers * HalfBlockBytes(); }
  // Bytes of one token over all layers, keys and values.
  int64_t TokenBytes() const { return 2 * num_layers * num_kv_heads * head_dim * ElementBytes(); }
  bool operator==(const KvLayout&) const = default;
};

class PagedKvStorage {
 public:
  explicit PagedKvStorage(const KvLayout& layout) : layout_(layout), keys_(layout.num_layers), values_(layout.num_layers) {}

  const KvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Grows or shrinks the pool to `num_blocks`, keeping the contents of the
  // blocks that remain. Invalidates pointers from KeyBase/ValueBase.
  void Resize(int64_t num_blocks);
  // Copies every layer's keys and values of block `from` into block `to`.
  void CopyBlock(int32_t from, int32_t to);

  // The keys and values of the first `tokens` positions of a sequence whose
  // block table is `blocks`, copied out to `out` (ExportTokens) or in from
  // `in` (ImportTokens), laid out [layer][keys, values][kv_head][token]
  // [head_dim]: the same bytes whatever the block size or block ids, so a
  // sequence saved from one block table loads into any other. The buffer
  // holds tokens * layout().TokenBytes() bytes; `blocks` covers `tokens`
  // positions.
  void ExportTokens(std::span<const int32_t> blocks, int64_t tokens, uint8_t* out) const;
  void ImportTokens(std::span<const int32_t> blocks, int64_t tokens, const uint8_t* in);

  // The first byte of layer `layer`'s key (value) blocks; block b starts
  // HalfBlockBytes() * b bytes further.
  uint8_t* KeyBase(int64_t layer) { return keys_[layer].get(); }
  uint8_t* ValueBase(int64_t layer) { return values_[layer].get(); }
  const uint8_t* KeyBase(int64_t layer) const { return keys_[layer].get(); }
  const uint8_t* ValueBase(int64_t layer) const { return values_[layer].get(); }

 private:
  KvLayout layout_;
  int64_t num_blocks_ = 0;
  // Left uninitialised (new[] of bytes): a block is always written before it
  // is read, and a large pool is not touched up front.
  std::vector<std::unique_ptr<uint8_t[]>> keys_;
  std::vector<std::unique_ptr<uint8_t[]>> values_;
};

}  // namespace flashroll::engine
