// Storage types of weight tensors and the exact byte layouts they imply.
//
// The quantised layouts are those of GGUF/ggml, because weights are mmapped
// straight from GGUF files: a row of `cols` elements is cols/32 blocks of
//   Q8_0: fp16 scale d, then 32 int8 q;            value = q * d   (34 bytes)
//   Q4_0: fp16 scale d, then 16 bytes of nibbles;  value = (q - 8) * d (18 bytes)
// In a Q4_0 block byte j holds element j in its low nibble and element j + 16
// in its high nibble. F16 is IEEE binary16, BF16 the top half of a binary32.
//
// Thread safety: everything here is a pure function or a constant.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace flashroll::kernels {

enum class DType { kF32, kF16, kBF16, kQ8_0, kQ4_0 };

// Elements per quantisation block (Q8_0 and Q4_0).
inline constexpr int64_t kQuantBlock = 32;

struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must match the GGUF layout");

struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must match the GGUF layout");

// Lower-case name as used in configs and logs: "f32", "f16", "bf16", "q8_0", "q4_0".
const char* DTypeName(DType dtype);

// True for the block-quantised types (whose rows need cols % kQuantBlock == 0).
bool IsQuantized(DType dtype);

// Bytes one row of `cols` elements occupies. Returns InvalidArgument when
// cols is negative, or not a multiple of kQuantBlock for a quantised type.
Result<int64_t> RowBytes(DType dtype, int64_t cols);

// IEEE binary16 <-> binary32. F32ToF16 rounds to nearest even, saturates to
// infinity past the largest half, keeps NaN a NaN and produces subnormals.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// bfloat16 <-> binary32. F32ToBf16 rounds to nearest even and keeps NaN a NaN.
float Bf16ToF32(uint16_t b);
uint16_t F32ToBf16(float f);

}  // namespace flashroll::kernels
