// Backend: the seam between the serving engine and the hardware that runs a
// model — where the KV blocks live and which kernels run a ForwardBatch.
//
// The engine decides what runs (step_scheduler, block_manager); a backend
// only stores blocks and runs batches, so a CUDA backend replaces this one
// without touching the scheduler. The CPU backend keeps the blocks in host
// memory (PagedKvStorage) and runs Model::ForwardBatch on the kernels of
// engine/kernels/.
//
// CopyKvBlock, ExportKv, ImportKv and SetModel cannot fail on the CPU; on a
// GPU a failure there is kept and returned by the next Forward.
//
// Thread safety: none; the engine loop thread owns its backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "engine/device/device.h"
#include "engine/models/forward_batch.h"
#include "engine/models/model.h"
#include "engine/models/paged_kv_storage.h"
#include "engine/sampling/sampler.h"

namespace flashroll::engine {

// One logit row's draw for Backend::ForwardAndDraw: when on_device, the
// backend samples the row itself by `plan` (Sampler::PlanDeviceDraw) into
// `result` and does not copy that row to the host.
struct RowDraw {
  bool on_device = false;
  DeviceDrawPlan plan;
  DeviceDraw result;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Creates storage for num_blocks blocks of `layout` (once, before Forward).
  virtual Status AllocateKv(const KvLayout& layout, int64_t num_blocks) = 0;
  // Copies block `from` into block `to` in every layer (copy-on-write).
  virtual void CopyKvBlock(int32_t from, int32_t to) = 0;
  // The KV of a sequence's first `tokens` positions (block table `blocks`)
  // copied out to, or in from, host memory laid out as
  // PagedKvStorage::ExportTokens says (pausing a sequence to disk).
  virtual void ExportKv(std::span<const int32_t> blocks, int64_t tokens, uint8_t* out) const = 0;
  virtual void ImportKv(std::span<const int32_t> blocks, int64_t tokens, const uint8_t* in) = 0;
  // Runs one batch; logits receives [batch.logit_rows.size()][vocab], routed
  // (when not null) every row's experts as Model::ForwardBatch says.
  virtual Status Forward(const ForwardBatch& batch, float* logits, std::vector<int32_t>* routed) = 0;
  // Whether ForwardAndDraw can sample rows where the logits are.
  virtual bool DrawsOnDevice() const { return false; }
  // Forward, but the rows with draws[k].on_device (draws has one entry per
  // logit row) are sampled on the device and not copied to `logits`.
  // Precondition: DrawsOnDevice(), or no entry on_device.
  virtual Status ForwardAndDraw(const ForwardBatch& batch, float* logits, std::vector<int32_t>* routed,
                                std::span<RowDraw> /*draws*/) {
    return Forward(batch, logits, routed);
  }
  // Runs later batches on `model` (same shapes; a weight swap). The KV
  // blocks are kept.
  virtual void SetModel(const Model& model) = 0;
};

// The CPU backend over `model` (which must outlive it).
std::unique_ptr<Backend> NewCpuBackend(const Model& model);

// The CUDA backend (engine/cuda/cuda_backend.cc) on `device`: it copies the
// model's weights to the GPU (bf16 weights stay bf16, other types become
// f32), keeps the KV blocks there and runs every kernel there; a step's
// rows are sampled there where their parameters allow (ForwardAndDraw) and
// the other rows' logits come back to host memory for the sampler. Dense
// models only so far. FailedPrecondition from CheckDevice, or naming what the model needs
// that the CUDA kernels lack; a build without CUDA always refuses.
Result<std::unique_ptr<Backend>> NewCudaBackend(const Model& model, const DeviceSpec& device);

// The backend `device` names: NewCpuBackend or NewCudaBackend.
Result<std::unique_ptr<Backend>> NewBackend(const Model& model, const DeviceSpec& device);

}  // namespace flashroll::engine
