// DeviceLogits: the logits of every position of one token sequence, run
// through a backend (backend.h) on any device: what `flashroll logits
// --device cuda` prints and what the GPU parity tests compare with
// transformers. f32 KV, one pass over all tokens (a prefill).
//
// Thread safety: reentrant; the Model is only read.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/device/device.h"
#include "engine/models/model.h"

namespace flashroll::engine {

// [tokens.size()][vocab] logits; with `routed` (MoE models) also the experts
// each position was routed to, [position][moe_layer][k] as
// Backend::Forward gives them. Errors: the device's (CheckDevice,
// NewBackend), an empty list, or a token id or position the model refuses.
Result<std::vector<float>> DeviceLogits(const Model& model, const DeviceSpec& device,
                                        const std::vector<int32_t>& tokens, std::vector<int32_t>* routed = nullptr);

}  // namespace flashroll::engine
