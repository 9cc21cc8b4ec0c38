#include "engine/serving/device_logits.h"

#include <numeric>

#include "engine/device/device_memory.h"
#include "engine/serving/backend.h"

namespace flashroll::engine {

Result<std::vector<float>> DeviceLogits(const Model& model, const DeviceSpec& device,
                                        const std::vector<int32_t>& tokens, std::vector<int32_t>* routed) {
  if (tokens.empty()) return Status::InvalidArgument("no tokens to run");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const KvLayout layout = model.KvLayoutFor(16, KvDType::kF32);
  const int64_t blocks = (n + layout.block_size - 1) / layout.block_size;
  FR_RETURN_IF_ERROR(CheckDevice(device, DeviceWeightBytes(device, model.files()) + blocks * layout.BlockBytes()));
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, NewBackend(model, device));
  FR_RETURN_IF_ERROR(backend->AllocateKv(layout, blocks));
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.seqs.push_back({0, n, table.data()});
  batch.logit_rows.resize(static_cast<size_t>(n));
  std::iota(batch.logit_rows.begin(), batch.logit_rows.end(), 0);
  std::vector<float> logits(static_cast<size_t>(n * model.config().vocab_size));
  FR_RETURN_IF_ERROR(backend->Forward(batch, logits.data(), routed));
  return logits;
}

}  // namespace flashroll::engine
