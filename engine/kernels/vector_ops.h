// Element-wise and reduction kernels of the model forward passes, on f32
// vectors: residual add, RMSNorm, SwiGLU, softmax, RoPE, and the dot/axpy
// pair of attention. Each runs the active ISA path of cpu_isa.h on the
// calling thread; results match the scalar path to float rounding (exp is a
// polynomial accurate to about 2 ulp on the vector paths).
//
// Thread safety: all functions are reentrant; distinct outputs may be
// computed from distinct threads at once.
#pragma once

#include <cstdint>

namespace flashroll::kernels {

// Returns sum_i a[i] * b[i].
float Dot(const float* a, const float* b, int64_t n);

// y[i] += alpha * x[i].
void Axpy(float alpha, const float* x, int64_t n, float* y);

// y[i] = a[i] + b[i]; y may be a or b.
void Add(const float* a, const float* b, int64_t n, float* y);

// y = x / sqrt(mean(x^2) + eps) * weight (Llama/Qwen RMSNorm); y may be x.
// Precondition: n > 0.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y);

// y[i] = silu(gate[i]) * up[i] with silu(g) = g / (1 + e^-g); y may be gate or up.
void SwiGlu(const float* gate, const float* up, int64_t n, float* y);

// In place: x = e^(x - max x) / sum e^(x - max x). n = 0 does nothing.
void Softmax(float* x, int64_t n);

// Rotates each of `heads` consecutive vectors of head_dim floats in x the
// Hugging Face Llama/Qwen way (rotate_half, the "neox" style): with
// h = head_dim / 2, for i < h
//   x[i]     = x[i] * cos[i] - x[i + h] * sin[i]
//   x[i + h] = x[i + h] * cos[i] + x[i] * sin[i].
// cos and sin hold h values for one position: the first half of HF's
// duplicated [cos, cos] rows. Precondition: head_dim is even.
void ApplyRopeNeox(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin);

}  // namespace flashroll::kernels
