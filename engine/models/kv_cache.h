// KvCache: the keys and values of one sequence, contiguous per layer.
//
// Layer l holds [length][num_kv_heads * head_dim] floats for keys and the
// same for values, RoPE already applied to the keys. Storage grows by
// doubling as tokens are appended. This is the simple per-sequence cache;
// the paged cache replaces it once the engine batches sequences.
//
// Thread safety: none; one sequence is driven by one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

namespace flashroll::engine {

class KvCache {
 public:
  KvCache(int64_t num_layers, int64_t kv_dim);

  // Tokens whose keys and values are stored.
  int64_t length() const { return length_; }
  int64_t kv_dim() const { return kv_dim_; }

  // Makes room for `extra` more tokens (keeps what is stored).
  void Reserve(int64_t extra);
  // Keys/values of token `pos` in `layer`; pos < length() + the reserved room.
  float* Key(int64_t layer, int64_t pos) { return &keys_[layer][pos * kv_dim_]; }
  float* Value(int64_t layer, int64_t pos) { return &values_[layer][pos * kv_dim_]; }
  const float* Key(int64_t layer, int64_t pos) const { return &keys_[layer][pos * kv_dim_]; }
  const float* Value(int64_t layer, int64_t pos) const { return &values_[layer][pos * kv_dim_]; }
  // Marks `n` more tokens as stored, after every layer has written them.
  void Advance(int64_t n) { length_ += n; }
  // Forgets every token past `length`.
  void Truncate(int64_t length);

 private:
  int64_t kv_dim_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
  std::vector<std::vector<float>> keys_;
  std::vector<std::vector<float>> values_;
};

}  // namespace flashroll::engine
