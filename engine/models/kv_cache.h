// KvCache: the KV cache of one sequence, for callers that run one sequence
// by hand (Model::Forward: the `logits` command, parity tests). It is the
// same paged storage the serving engine uses, with f32 values and a block
// table that grows as tokens are appended.
//
// Thread safety: none; one sequence is driven by one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/models/paged_kv_storage.h"

namespace flashroll::engine {

class KvCache {
 public:
  explicit KvCache(const KvLayout& layout) : storage_(layout) {}

  // Tokens whose keys and values are stored.
  int64_t length() const { return length_; }

  // Makes room for `extra` more tokens (keeps what is stored).
  void Reserve(int64_t extra);
  // Marks `n` more tokens as stored, after every layer has written them.
  void Advance(int64_t n) { length_ += n; }
  // Forgets every token past `length`.
  void Truncate(int64_t length);

  PagedKvStorage* storage() { return &storage_; }
  const std::vector<int32_t>& block_table() const { return blocks_; }

 private:
  PagedKvStorage storage_;
  std::vector<int32_t> blocks_;
  int64_t length_ = 0;
};

}  // namespace flashroll::engine
