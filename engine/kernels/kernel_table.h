// Internal: the function table each instruction-set path fills in, and the
// layouts the matrix-multiply driver hands to it.
//
// kernels_scalar.cc, kernels_avx2.cc and kernels_avx512.cc each define one
// table; cpu_isa.cc picks the one that runs. This header holds declarations
// and plain structs only, so including it from a file built with AVX-512
// flags emits no code that another path could end up calling.
//
// Thread safety: the tables are immutable; the functions are reentrant.
#pragma once

#include <cstdint>

#include "engine/kernels/dtype.h"

namespace flashroll::kernels::internal {

// One block of 32 activations quantised to int8 for the integer dot products
// against Q8_0 and Q4_0 weights: value = qs[j] * d. `sum` is the sum of qs,
// which turns the unsigned Q4_0 nibbles q into (q - 8) for free.
struct ActBlock {
  float d;
  int32_t sum;
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(ActBlock) == 40, "ActBlock is packed as three fields");

// One call's operands. Activation row i starts at
//   static_cast<const float*>(x) + i * cols           (f32, f16, bf16 weights)
//   static_cast<const ActBlock*>(x) + i * cols / 32   (Q8_0, Q4_0 weights)
// and output row i at y + i * rows.
struct MatMulArgs {
  const uint8_t* w;     // rows x row_bytes
  int64_t row_bytes;
  int64_t rows;
  int64_t cols;
  const void* x;        // n activation rows, layout above
  int64_t n;
  int64_t pass_rows;    // activation rows per pass over the weights, >= 1
  float* y;             // [n][rows]
};

// Computes the outputs of weight rows [row_begin, row_end) for all n
// activation rows, in passes of pass_rows activation rows. Implementations
// tile so each weight row is loaded from memory once per pass.
using MatMulRowsFn = void (*)(const MatMulArgs& args, int64_t row_begin, int64_t row_end);

// One split of paged attention (attention.h): the `group` query heads that
// share KV head kv_head, over keys [key_begin, key_end) of one sequence.
// Leaves the online-softmax state: the running max m[g], the sum of
// exponentials l[g] and the unnormalised output acc[g][head_dim].
struct AttendSplitArgs {
  const float* q;  // [group][head_dim]
  int64_t group;
  int64_t head_dim;
  float scale;
  const int32_t* block_table;
  const uint8_t* k_base;
  const uint8_t* v_base;
  int64_t half_block_bytes;
  int64_t block_size;
  int64_t kv_head;
  bool bf16;
  int64_t key_begin, key_end;
  float* m;
  float* l;
  float* acc;
};

struct KernelTable {
  MatMulRowsFn matmul_f32;
  MatMulRowsFn matmul_f16;
  MatMulRowsFn matmul_bf16;
  MatMulRowsFn matmul_q8_0;
  MatMulRowsFn matmul_q4_0;
  // Quantises cols floats (cols % 32 == 0) to cols / 32 ActBlocks with
  // d = max|x| / 127 and q = round-half-even(x * 127 / max|x|), bit-identical
  // on every path.
  void (*quantize_act)(const float* x, int64_t cols, ActBlock* out);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, int64_t n, float* y);
  void (*add)(const float* a, const float* b, int64_t n, float* y);
  void (*rms_norm)(const float* x, const float* weight, int64_t n, float eps, float* y);
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* y);
  void (*softmax)(float* x, int64_t n);
  void (*rope_neox)(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin);
  // Null where the path has no vector kernel (attention.cc's portable one
  // runs). Requires head_dim % 16 == 0.
  void (*attend_split)(const AttendSplitArgs& args);
};

const KernelTable& ScalarKernelTable();
const KernelTable& Avx2KernelTable();
const KernelTable& Avx512KernelTable();

// The table of ActiveIsa().
const KernelTable& ActiveKernels();

}  // namespace flashroll::kernels::internal
