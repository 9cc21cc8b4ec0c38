#include "engine/kernels/quantize.h"

#include <cmath>
#include <cstring>

#include "engine/kernels/half_bits.h"

namespace flashroll::kernels {
namespace {

using internal::Bf16ToFloat;
using internal::FloatToBf16;
using internal::FloatToHalf;
using internal::HalfToFloat;

void QuantizeBlockQ8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = FloatToHalf(d);
  for (int64_t j = 0; j < kQuantBlock; ++j) b->qs[j] = static_cast<int8_t>(std::round(x[j] * id));
}

void QuantizeBlockQ4_0(const float* x, BlockQ4_0* b) {
  float amax = 0.0f;
  float max = 0.0f;  // the element of largest magnitude, sign kept
  for (int64_t j = 0; j < kQuantBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = FloatToHalf(d);
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t j = 0; j < kHalf; ++j) {
    const int lo = static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f));
    const int hi = static_cast<int>(static_cast<int8_t>(x[j + kHalf] * id + 8.5f));
    b->qs[j] = static_cast<uint8_t>((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
  }
}

}  // namespace

Status QuantizeRow(DType dtype, const float* x, int64_t cols, void* out) {
  FR_ASSIGN_OR_RETURN(const int64_t bytes, RowBytes(dtype, cols));
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, x, static_cast<size_t>(bytes));
      break;
    case DType::kF16: {
      auto* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < cols; ++i) o[i] = FloatToHalf(x[i]);
      break;
    }
    case DType::kBF16: {
      auto* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < cols; ++i) o[i] = FloatToBf16(x[i]);
      break;
    }
    case DType::kQ8_0: {
      auto* o = static_cast<BlockQ8_0*>(out);
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) QuantizeBlockQ8_0(x + b * kQuantBlock, o + b);
      break;
    }
    case DType::kQ4_0: {
      auto* o = static_cast<BlockQ4_0*>(out);
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) QuantizeBlockQ4_0(x + b * kQuantBlock, o + b);
      break;
    }
  }
  return Status::Ok();
}

Status DequantizeRow(DType dtype, const void* row, int64_t cols, float* out) {
  FR_ASSIGN_OR_RETURN(const int64_t bytes, RowBytes(dtype, cols));
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, row, static_cast<size_t>(bytes));
      break;
    case DType::kF16: {
      const auto* r = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = HalfToFloat(r[i]);
      break;
    }
    case DType::kBF16: {
      const auto* r = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) out[i] = Bf16ToFloat(r[i]);
      break;
    }
    case DType::kQ8_0: {
      const auto* r = static_cast<const BlockQ8_0*>(row);
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
        const float d = HalfToFloat(r[b].d);
        for (int64_t j = 0; j < kQuantBlock; ++j) out[b * kQuantBlock + j] = d * r[b].qs[j];
      }
      break;
    }
    case DType::kQ4_0: {
      const auto* r = static_cast<const BlockQ4_0*>(row);
      constexpr int64_t kHalf = kQuantBlock / 2;
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
        const float d = HalfToFloat(r[b].d);
        float* o = out + b * kQuantBlock;
        for (int64_t j = 0; j < kHalf; ++j) {
          o[j] = d * static_cast<float>((r[b].qs[j] & 0x0f) - 8);
          o[j + kHalf] = d * static_cast<float>((r[b].qs[j] >> 4) - 8);
        }
      }
      break;
    }
  }
  return Status::Ok();
}

}  // namespace flashroll::kernels
