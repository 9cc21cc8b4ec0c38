#include "engine/kernels/dtype.h"

#include <string>

#include "engine/kernels/half_bits.h"

namespace flashroll::kernels {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
  }
  return "unknown";
}

bool IsQuantized(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_0; }

Result<int64_t> RowBytes(DType dtype, int64_t cols) {
  if (cols < 0) return Status::InvalidArgument("negative column count " + std::to_string(cols));
  if (IsQuantized(dtype) && cols % kQuantBlock != 0) {
    return Status::InvalidArgument(std::string(DTypeName(dtype)) + " row of " + std::to_string(cols) +
                                   " columns is not a multiple of the block size 32");
  }
  switch (dtype) {
    case DType::kF32: return cols * 4;
    case DType::kF16:
    case DType::kBF16: return cols * 2;
    case DType::kQ8_0: return cols / kQuantBlock * static_cast<int64_t>(sizeof(BlockQ8_0));
    case DType::kQ4_0: return cols / kQuantBlock * static_cast<int64_t>(sizeof(BlockQ4_0));
  }
  return Status::InvalidArgument("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

float F16ToF32(uint16_t h) { return internal::HalfToFloat(h); }
uint16_t F32ToF16(float f) { return internal::FloatToHalf(f); }
float Bf16ToF32(uint16_t b) { return internal::Bf16ToFloat(b); }
uint16_t F32ToBf16(float f) { return internal::FloatToBf16(f); }

}  // namespace flashroll::kernels
