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
//   Attention: one warp per (row, head); lane j takes positions j, j+32, ...
//     of the row's context with an online softmax, and the 32 partial
//     (max, sum, output) triples merge through shared memory, lanes summed in
//     order 0 .. 31: the split of the KV into 32 parts is fixed by the
//     sequence's own length.
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

// y[n][w.rows] = x[n][w.cols] . W^T, plus residual[n][w.rows] when it is not
// null (y may be residual). bf16 weights multiply the activations as two
// bf16 terms each (hi + lo, about 2^-17 of x), so the result is within f32
// rounding of the f32 product, not of a bf16 one.
void MatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y, cudaStream_t stream,
            const float* residual = nullptr);

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
