#include "engine/models/kv_cache.h"

namespace flashroll::engine {

void KvCache::Reserve(int64_t extra) {
  const int64_t bs = storage_.layout().block_size;
  const int64_t need = (length_ + extra + bs - 1) / bs;
  if (need <= storage_.num_blocks()) return;
  // Doubling keeps appends amortised O(1).
  int64_t blocks = storage_.num_blocks() == 0 ? need : storage_.num_blocks();
  while (blocks < need) blocks *= 2;
  storage_.Resize(blocks);
  while (static_cast<int64_t>(blocks_.size()) < blocks) blocks_.push_back(static_cast<int32_t>(blocks_.size()));
}

void KvCache::Truncate(int64_t length) {
  if (length < length_) length_ = length;
}

}  // namespace flashroll::engine
