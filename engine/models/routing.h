// Compact per-token MoE routing: the k expert ids each token was sent to in
// every MoE layer, as the serving engine keeps them with a sequence.
//
// Layout: [token][moe_layer][k], one id per element, the ids in the order
// the router ranked them (descending probability; model.h). An id takes one
// byte when the model has at most 256 experts, else two (little-endian
// uint16). "moe_layer" counts only the layers whose MLP is a mixture of
// experts, in layer order. A dense model has an empty shape and no routing.
//
// Thread safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace flashroll::engine {

struct RoutingShape {
  int64_t moe_layers = 0;
  int64_t k = 0;            // experts per token
  int64_t num_experts = 0;

  bool empty() const { return moe_layers == 0; }
  int64_t IdBytes() const { return num_experts <= 256 ? 1 : 2; }
  int64_t TokenIds() const { return moe_layers * k; }
  int64_t TokenBytes() const { return TokenIds() * IdBytes(); }
  bool operator==(const RoutingShape&) const = default;
};

// Appends one token's ids ([moe_layer][k] ints) to `out` in compact form.
inline void PackRouting(const RoutingShape& shape, const int32_t* ids, std::vector<uint8_t>* out) {
  const int64_t n = shape.TokenIds();
  if (shape.IdBytes() == 1) {
    for (int64_t i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(ids[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      out->push_back(static_cast<uint8_t>(v & 0xff));
      out->push_back(static_cast<uint8_t>(v >> 8));
    }
  }
}

// Overwrites token `t` of compact `routing` with `ids` ([moe_layer][k]).
inline void StoreRouting(const RoutingShape& shape, int64_t t, const int32_t* ids, std::vector<uint8_t>* routing) {
  std::vector<uint8_t> one;
  PackRouting(shape, ids, &one);
  std::memcpy(routing->data() + t * shape.TokenBytes(), one.data(), one.size());
}

// Token `t` of compact `routing` as ints, appended to `out`.
inline void UnpackRouting(const RoutingShape& shape, std::span<const uint8_t> routing, int64_t t,
                          std::vector<int32_t>* out) {
  const int64_t n = shape.TokenIds();
  const uint8_t* p = routing.data() + t * shape.TokenBytes();
  for (int64_t i = 0; i < n; ++i) {
    out->push_back(shape.IdBytes() == 1 ? p[i] : static_cast<int32_t>(p[2 * i] | (p[2 * i + 1] << 8)));
  }
}

}  // namespace flashroll::engine
