#include "engine/kernels/vector_ops.h"

#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels {

using internal::ActiveKernels;

float Dot(const float* a, const float* b, int64_t n) { return ActiveKernels().dot(a, b, n); }

void Axpy(float alpha, const float* x, int64_t n, float* y) { ActiveKernels().axpy(alpha, x, n, y); }

void Add(const float* a, const float* b, int64_t n, float* y) { ActiveKernels().add(a, b, n, y); }

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  ActiveKernels().rms_norm(x, weight, n, eps, y);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* y) { ActiveKernels().swiglu(gate, up, n, y); }

void Softmax(float* x, int64_t n) { ActiveKernels().softmax(x, n); }

void ApplyRopeNeox(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  ActiveKernels().rope_neox(x, heads, head_dim, cos, sin);
}

}  // namespace flashroll::kernels
