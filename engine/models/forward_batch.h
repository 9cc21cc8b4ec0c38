// ForwardBatch: one step's worth of tokens from many sequences, flattened.
//
// Rows are grouped by sequence. Sequence s contributes num_tokens rows at
// positions start .. start + num_tokens - 1; its keys and values for
// positions below start are already in the KV storage, in the blocks its
// block table lists (block_table[p / block_size] holds position p). The
// table must already cover every position the batch writes.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/attention.h"

namespace flashroll::engine {

struct BatchSequence {
  int64_t start = 0;
  int64_t num_tokens = 0;
  const int32_t* block_table = nullptr;
};

struct ForwardBatch {
  std::vector<int32_t> tokens;      // all rows, sequence by sequence
  std::vector<BatchSequence> seqs;
  std::vector<int64_t> logit_rows;  // rows whose logits are wanted, ascending
  // MoE routing replay (routing.h): row r uses the experts
  // replay_ids[replay_offsets[r] ...] ([moe_layer][k]) instead of the
  // router's top-k, or routes afresh when its offset is -1. Empty
  // replay_offsets: every row routes afresh. The gate weights are the
  // router's probabilities of the replayed experts, normalised as the model
  // normalises its own choice (model.h), so replaying a row's own routing
  // changes no bit.
  std::vector<int64_t> replay_offsets;  // [rows] or empty
  std::vector<int32_t> replay_ids;
};

// Buffers a forward pass reuses from step to step; one per calling thread.
struct ForwardScratch {
  std::vector<float> x, h, attn, y, q, k, v, gate, up, rope;
  std::vector<int64_t> positions;
  std::vector<const int32_t*> tables;
  std::vector<float> moe_probs, moe_xs, moe_ys, shared;
  std::vector<int32_t> moe_chosen;
  std::vector<std::vector<int64_t>> moe_tokens;
  std::vector<std::vector<float>> moe_weights;
  kernels::AttentionScratch attention;
};

}  // namespace flashroll::engine
