// DeviceMatMulBf16 (engine/device/device_matmul.h): one product through kernels.h's MatMul, with
// its own buffers, for the GPU tests.
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kernels.h"
#include "engine/device/device_matmul.h"

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

}  // namespace flashroll::engine
