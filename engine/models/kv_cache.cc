#include "engine/models/kv_cache.h"

#include <algorithm>

namespace flashroll::engine {

KvCache::KvCache(int64_t num_layers, int64_t kv_dim)
    : kv_dim_(kv_dim), keys_(static_cast<size_t>(num_layers)), values_(static_cast<size_t>(num_layers)) {}

void KvCache::Reserve(int64_t extra) {
  const int64_t need = length_ + extra;
  if (need <= capacity_) return;
  capacity_ = std::max(need, std::max<int64_t>(64, 2 * capacity_));
  for (auto& k : keys_) k.resize(static_cast<size_t>(capacity_ * kv_dim_));
  for (auto& v : values_) v.resize(static_cast<size_t>(capacity_ * kv_dim_));
}

void KvCache::Truncate(int64_t length) { length_ = std::min(length_, std::max<int64_t>(0, length)); }

}  // namespace flashroll::engine
