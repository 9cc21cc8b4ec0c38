#include <optional>

#include "engine/serving/backend.h"

namespace flashroll::engine {
namespace {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const Model& model) : model_(&model) {}

  const char* name() const override { return "cpu"; }

  Status AllocateKv(const KvLayout& layout, int64_t num_blocks) override {
    storage_.emplace(layout);
    storage_->Resize(num_blocks);
    return Status::Ok();
  }

  void CopyKvBlock(int32_t from, int32_t to) override { storage_->CopyBlock(from, to); }

  void ExportKv(std::span<const int32_t> blocks, int64_t tokens, uint8_t* out) const override {
    storage_->ExportTokens(blocks, tokens, out);
  }

  void ImportKv(std::span<const int32_t> blocks, int64_t tokens, const uint8_t* in) override {
    storage_->ImportTokens(blocks, tokens, in);
  }

  void SetModel(const Model& model) override { model_ = &model; }

  Status Forward(const ForwardBatch& batch, float* logits, std::vector<int32_t>* routed) override {
    if (!storage_) return Status::FailedPrecondition("the CPU backend has no KV storage yet");
    return model_->ForwardBatch(batch, &*storage_, &scratch_, logits, routed);
  }

 private:
  const Model* model_;
  std::optional<PagedKvStorage> storage_;
  ForwardScratch scratch_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend(const Model& model) { return std::make_unique<CpuBackend>(model); }

Result<std::unique_ptr<Backend>> NewBackend(const Model& model, const DeviceSpec& device) {
  if (device.is_cuda()) return NewCudaBackend(model, device);
  return NewCpuBackend(model);
}

}  // namespace flashroll::engine
