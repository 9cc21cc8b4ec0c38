// engine/device/device_kernels.h: kernels.h's MatMul and DrawRows one call
// at a time, with buffers of their own, for the GPU tests.
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/kernels.h"
#include "engine/device/device_kernels.h"

namespace flashroll::engine {

Result<std::vector<float>> DeviceMatMulBf16(const DeviceSpec& device, const std::vector<uint16_t>& w, int64_t rows,
                                            int64_t cols, const std::vector<float>& x, int64_t n,
                                            const std::vector<float>& residual) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  if (cols % 8 != 0 || static_cast<int64_t>(w.size()) != rows * cols || static_cast<int64_t>(x.size()) != n * cols ||
      (!residual.empty() && static_cast<int64_t>(residual.size()) != n * rows)) {
    return Status::InvalidArgument("DeviceMatMulBf16: W must be [rows][cols] with cols a multiple of 8, x [n][cols], "
                                   "residual empty or [n][rows]");
  }
  using cuda::CudaCheck;
  const size_t out_bytes = static_cast<size_t>(n * rows) * sizeof(float);
  cuda::DeviceBuffer dw, dx, dy;
  FR_RETURN_IF_ERROR(dw.Reserve(w.size() * 2 + 1));
  FR_RETURN_IF_ERROR(dx.Reserve(x.size() * sizeof(float) + 1));
  FR_RETURN_IF_ERROR(dy.Reserve(out_bytes + 1));
  FR_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(dw.get(), w.data(), w.size() * 2, cudaMemcpyHostToDevice), "uploading W"));
  FR_RETURN_IF_ERROR(
      CudaCheck(cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "uploading x"));
  if (!residual.empty()) {
    FR_RETURN_IF_ERROR(
        CudaCheck(cudaMemcpy(dy.get(), residual.data(), out_bytes, cudaMemcpyHostToDevice), "uploading residual"));
  }
  cuda::DeviceMatrix m;
  m.bf16 = true;
  m.data = dw.get();
  m.rows = rows;
  m.cols = cols;
  cuda::MatMul(m, dx.get<float>(), n, dy.get<float>(), nullptr, residual.empty() ? nullptr : dy.get<float>());
  FR_RETURN_IF_ERROR(CudaCheck(cudaGetLastError(), "launching the matrix kernel"));
  std::vector<float> y(static_cast<size_t>(n * rows));
  FR_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(y.data(), dy.get(), out_bytes, cudaMemcpyDeviceToHost), "reading y"));
  return y;
}

Result<std::vector<DeviceDrawOutcome>> DeviceDrawRows(const DeviceSpec& device, const std::vector<float>& logits,
                                                 int64_t vocab, const std::vector<SamplingParams>& params,
                                                 const std::vector<uint64_t>& choices,
                                                 const std::vector<uint64_t>& indices) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  const int64_t rows = static_cast<int64_t>(params.size());
  if (vocab <= 0 || static_cast<int64_t>(logits.size()) != rows * vocab || choices.size() != params.size() ||
      indices.size() != params.size()) {
    return Status::InvalidArgument("DeviceDrawRows: logits must be [rows][vocab], one choice and index per row");
  }
  std::vector<cuda::DrawParams> plans(params.size());
  for (size_t r = 0; r < params.size(); ++r) {
    if (!Sampler::DrawsOnDevice(params[r])) {
      return Status::InvalidArgument("DeviceDrawRows: row " + std::to_string(r) + "'s parameters need the host sampler");
    }
    const DeviceDrawPlan plan = Sampler::PlanDeviceDraw(params[r], choices[r], indices[r]);
    plans[r].greedy = plan.greedy ? 1 : 0;
    plans[r].inv_t = plan.inv_t;
    plans[r].u = plan.u;
  }
  using cuda::CudaCheck;
  cuda::DeviceBuffer dl, dp, ds, dr;
  FR_RETURN_IF_ERROR(dl.Reserve(logits.size() * sizeof(float) + 1));
  FR_RETURN_IF_ERROR(dp.Reserve(plans.size() * sizeof(cuda::DrawParams) + 1));
  FR_RETURN_IF_ERROR(ds.Reserve(static_cast<size_t>(rows * ((vocab + 63) / 64)) * sizeof(double) + 1));
  FR_RETURN_IF_ERROR(dr.Reserve(plans.size() * sizeof(cuda::DrawResult) + 1));
  FR_RETURN_IF_ERROR(CudaCheck(
      cudaMemcpy(dl.get(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice), "uploading logits"));
  FR_RETURN_IF_ERROR(CudaCheck(
      cudaMemcpy(dp.get(), plans.data(), plans.size() * sizeof(cuda::DrawParams), cudaMemcpyHostToDevice),
      "uploading the plans"));
  cuda::DrawRows(dl.get<float>(), rows, vocab, dp.get<cuda::DrawParams>(), ds.get<double>(), dr.get<cuda::DrawResult>(),
                 nullptr);
  FR_RETURN_IF_ERROR(CudaCheck(cudaGetLastError(), "launching the draw"));
  std::vector<cuda::DrawResult> results(plans.size());
  FR_RETURN_IF_ERROR(CudaCheck(
      cudaMemcpy(results.data(), dr.get(), results.size() * sizeof(cuda::DrawResult), cudaMemcpyDeviceToHost),
      "reading the draws"));
  std::vector<DeviceDrawOutcome> out;
  for (size_t r = 0; r < results.size(); ++r) {
    const cuda::DrawResult& d = results[r];
    const DeviceDraw draw{d.token, d.token_logit, d.max_logit, d.weight_sum};
    out.push_back({draw, Sampler::FinishDeviceDraw(draw, params[r])});
  }
  return out;
}

Result<int64_t> DeviceUploadedWeightBytes(const DeviceSpec& device, const Model& model) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  FR_RETURN_IF_ERROR(cuda::CudaCheck(cudaSetDevice(device.ordinal), "selecting the GPU"));
  FR_ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceWeights> weights, cuda::DeviceWeights::Upload(model));
  return weights->bytes;
}

}  // namespace flashroll::engine
