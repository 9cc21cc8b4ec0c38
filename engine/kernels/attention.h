// Paged attention over a block-structured KV cache: the attention of every
// query row of a step, whatever mix of prefill chunks and decodes it holds.
//
// Exactness: the output of query row i depends only on its query vector, its
// position and the keys/values 0..pos of its sequence — never on the other
// rows, the thread count or whether the row came from prefill or decode.
// Keys are visited in fixed splits of kSplitKeys (the flash-decoding split,
// whose points depend only on the row's own position), each split in block
// order with the same online-softmax updates, and the splits' partial
// results are combined in split order. Each (row, KV head, split) is one
// task for the worker pool and handles all query heads sharing that KV head,
// so a KV head's keys are read once for its whole group (GQA).
//
// Thread safety: reentrant; uses the worker pool of cpu_threads.h.
#pragma once

#include <cstdint>
#include <vector>

namespace flashroll::kernels {

// Keys per split of one query's attention. A multiple of every block size
// the engine uses (16, 32, 64, 128, 256).
constexpr int64_t kSplitKeys = 256;

struct PagedAttentionArgs {
  const float* q;   // [rows][num_heads * head_dim], RoPE applied
  float* out;       // [rows][num_heads * head_dim]
  int64_t rows = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1;
  // This layer's KV storage: block b's keys start at k_base + b * half_block_bytes.
  const uint8_t* k_base = nullptr;
  const uint8_t* v_base = nullptr;
  int64_t half_block_bytes = 0;
  int64_t block_size = 16;
  bool bf16 = false;
  const int64_t* positions = nullptr;       // [rows]: the query's position; keys 0..pos are attended
  const int32_t* const* block_tables = nullptr;  // [rows]: the block table of the row's sequence
};

// Scratch memory reused between calls, so a step allocates nothing once warm.
struct AttentionScratch {
  std::vector<int64_t> task_row, task_split, row_first_task;
  std::vector<float> partial_m, partial_l, partial_acc;
};

void PagedAttention(const PagedAttentionArgs& args, AttentionScratch* scratch);

}  // namespace flashroll::kernels
