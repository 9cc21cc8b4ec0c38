// The CUDA backend's kernels (kernels.cu), callable from host C++.
//
// Every reduction runs in one fixed order that depends only on the row's own
// data and shape, never on how many rows a launch holds or which other rows
// are in it, and none uses atomics: a row's result is bitwise the same alone,
// in any batch, in a prefill chunk or a decode step.
//   MatMul, bf16 weights: tensor cores (mma.sync m16n8k16, f32 accumulate),
//     the weights as the 16-row operand and the tokens as the 8-column one;
//     each row's K is cut into slices fixed by the width alone, each slice
//     summed in column order and the slices added in a fixed order, whatever
//     tile the launch's row count picks (kernels.cu, MmaMatMulKernel).
//   MatMul, f32 weights: one warp per output feature; lane j sums elements
//     8j .. 8j+7, 8j+256 .., in order, then the 32 lane sums are added by a
//     fixed butterfly. Rows run in groups of 4 that share the weight loads.
//   RmsNorm: one 256-thread block per row, strided partial sums (float4 ones
//     where the width is a multiple of 4), then a fixed tree.
//   Mixture of experts: the router's softmax per row by a fixed butterfly,
//     top-k ties to the lower id; each (row, expert) pair's products run in
//     the MatMul kernels above on a slot of its expert's group, so a pair's
//     sums do not depend on which other rows chose that expert; a row's
//     expert outputs are added in ascending expert id.
//   Attention (attention.cu): one 8-warp block per (row, head); the row's
//     context is cut into chunks of 32 positions (a cut fixed by the
//     sequence's own length), warp w takes chunks w, w + 8, ... in order
//     with an online softmax, and the 8 partial (max, sum, output) triples
//     merge in warp order.
// All launches go on `stream`; none synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace flashroll::engine::cuda {

// A weight matrix on the device: rows x cols, row-major, f32 or bf16.
struct DeviceMatrix {
  bool bf16 = false;
  const void* data = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (a multiple of 8)
};

// x[t] = table[tokens[t]] as f32.
void EmbedRows(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* x, cudaStream_t stream);

// out[i] = rmsnorm(x[rows ? rows[i] : i]) * weight, rows of `width`.
void RmsNormRows(const float* x, const int64_t* rows, int64_t n, int64_t width, const float* weight, float eps,
                 float* out, cudaStream_t stream);

// Where the (row, expert) pairs of a MoE layer sit when grouped by expert
// (GroupByExpert): tile i covers slots begin[i] .. end[i] - 1, all routed to
// expert[i], at most `slots` of them; *count tiles are in use out of `max`
// (the launch's grid). gather[slot] is the activation row of a slot, or null
// when the slots are the rows. All are device pointers; a null count means a
// dense product.
struct ExpertTiles {
  const int32_t* expert = nullptr;
  const int32_t* begin = nullptr;
  const int32_t* end = nullptr;
  const int32_t* count = nullptr;
  const int32_t* gather = nullptr;
  int64_t max = 0;
  int slots = 8;
};

// y[n][w.rows] = x[n][w.cols] . W^T, plus residual[n][w.rows] when it is not
// null (y may be residual). bf16 weights multiply the activations as two
// bf16 terms each (hi + lo, about 2^-17 of x), so the result is within f32
// rounding of the f32 product, not of a bf16 one.
void MatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y, cudaStream_t stream,
            const float* residual = nullptr);

// The tile size GroupByExpert should use for n x k pairs over `experts`
// experts whose matrices are bf16 (or not): it only picks a launch shape.
int ExpertTileSlots(bool bf16, int64_t pairs, int64_t experts);
// Tiles that `pairs` pairs over `experts` experts can need at `slots` a tile.
int64_t MaxExpertTiles(int64_t pairs, int64_t experts, int tile_slots);

// Expert products over grouped slots: y[slot][w.rows / experts] =
// x[tiles.gather ? gather[slot] : slot] . W_e^T for the slot's expert e,
// where w stacks the experts' [w.rows / experts][w.cols] matrices. Each
// output element is summed exactly as MatMul sums it.
void ExpertMatMul(const DeviceMatrix& w, int64_t experts, const float* x, const ExpertTiles& tiles, float* y,
                  cudaStream_t stream);

// Per row t of router_logits [n][experts]: softmax, then the k experts of
// highest probability (ties to the lower id) in descending order, or, when
// replay_offsets[t] >= 0, replay_ids[replay_offsets[t] + moe_index * k ..];
// weights are their probabilities, divided by their sum when norm_topk
// (model.h). Writes chosen[n][k], weights[n][k], ascending[n][k] (the
// indices j of chosen[t] in ascending expert id) and
// routed[t * routed_stride + moe_index * k + j]. replay_offsets may be null.
bool RouteSupports(int64_t k);
void RouteRows(const float* router_logits, int64_t n, int64_t experts, int64_t k, bool norm_topk,
               const int64_t* replay_offsets, const int32_t* replay_ids, int64_t moe_index, int64_t routed_stride,
               int32_t* chosen, float* weights, int32_t* ascending, int32_t* routed, cudaStream_t stream);

// Groups the n x k pairs of chosen[n][k] by expert: pair_slot[n * k] (the
// slot of pair t * k + j), slot_row[n * k] (a slot's row), slots in
// ascending expert id and, within one expert, ascending pair; and the tiles
// of at most `slots` slots (tile_* have room for MaxExpertTiles).
void GroupByExpert(const int32_t* chosen, int64_t n, int64_t k, int64_t experts, int32_t* pair_slot,
                   int32_t* slot_row, int32_t* tile_expert, int32_t* tile_begin, int32_t* tile_end,
                   int32_t* tile_count, int slots, cudaStream_t stream);

// x[t] += sum over row t's experts in ascending id of weight x
// expert_out[slot], plus, when shared is not null, sigmoid(shared_gate .
// h[t]) x shared[t] (a shared expert's output).
void CombineExperts(float* x, const float* expert_out, const int32_t* pair_slot, const float* weights,
                    const int32_t* ascending, int64_t n, int64_t k, int64_t hidden, const float* shared,
                    const float* shared_gate, const float* h, cudaStream_t stream);

// The paged KV of one layer and where each row's tokens sit in it.
struct KvView {
  void* keys = nullptr;    // [block][kv_head][slot][head_dim]
  void* values = nullptr;
  bool bf16 = false;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  const int64_t* positions = nullptr;     // [rows]
  const int32_t* tables = nullptr;        // all sequences' block tables, concatenated
  const int64_t* table_offsets = nullptr; // [rows]: where the row's table starts in `tables`
};

// Per row, in place on qkv [n][heads + 2 kv_heads][hd] (the q heads, then
// k, then v: the fused projection's output): adds the biases (when not
// null), RMSNorms each q and k head (when q_norm is not null), rotates q and
// k (rope: [n][hd] = cos[hd/2], sin[hd/2]) and writes k and v into the row's
// KV slot.
void QkvPost(float* qkv, const float* q_bias, const float* k_bias, const float* v_bias, const float* q_norm,
             const float* k_norm, float eps, const float* rope, int64_t n, int64_t heads, const KvView& kv,
             cudaStream_t stream);

// out[n][heads][hd] = softmax(q . K^T * scale) . V over each row's positions
// 0 .. positions[row] (causal); row t's q heads start at q + t * q_stride.
// head_dim must be 16, 32, 64 or 128 (AttentionSupports).
void Attention(const float* q, int64_t q_stride, int64_t n, int64_t heads, float scale, const KvView& kv, float* out,
               cudaStream_t stream);
bool AttentionSupports(int64_t head_dim);

// y[t][i] = silu(gate) * up with gate = gate_up[t][i], up = gate_up[t][width + i]
// (the fused gate/up projection's output), t < n, i < width.
void SwiGlu(const float* gate_up, int64_t n, int64_t width, float* y, cudaStream_t stream);

// One logit row's draw under the CPU sampler's contract
// (engine/sampling/sampler.h) for its plain parameters (no penalties, no
// top-k, top-p or min-p): greedy is the argmax, ties to the lower id;
// otherwise the weights exp((l - l_max) x inv_t) come from the sampler's own
// degree-13 polynomial in double without fused multiply-adds, are summed in
// its blocks of 64 by its fixed tree and the blocks in ascending id, and the
// token is the inverse CDF at u x total, walked the same way. The result is
// what the CPU sampler computes before it takes the log.
struct DrawParams {
  double inv_t = 1.0;  // 1 / temperature (1 when greedy)
  double u = 0.0;      // UniformDouble(seed, choice, token index); unused when greedy
  int32_t greedy = 1;
};
struct DrawResult {
  int32_t token = 0;
  float token_logit = 0;
  float max_logit = 0;
  double weight_sum = 0;  // the block sum of every weight
};
// Draws the n rows of logits [n][vocab] with params[n] into out[n];
// block_sums has room for n x ceil(vocab / 64) doubles.
void DrawRows(const float* logits, int64_t n, int64_t vocab, const DrawParams* params, double* block_sums,
              DrawResult* out, cudaStream_t stream);

}  // namespace flashroll::engine::cuda
