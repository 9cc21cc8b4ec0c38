#include "engine/kernels/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/log.h"
#include "engine/kernels/cpu_threads.h"
#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels {
namespace {

using internal::ActBlock;
using internal::KernelTable;
using internal::MatMulArgs;
using internal::MatMulRowsFn;

// Below this many weight elements x activation rows a call runs on one
// thread: handing work to the pool costs about a microsecond.
constexpr int64_t kMinParallelWork = 32 * 1024;
// Output rows are split into about this many tasks per thread, so that a
// thread that loses its CPU for a while holds up only a small share.
constexpr int64_t kTasksPerThread = 4;
// Kernels tile weight rows in fours; tasks start on a tile boundary.
constexpr int64_t kRowAlign = 4;
// A pass over the weights takes as many activation rows as fit in half a
// Zen 4 L2, so they stay cached while each weight tile meets all of them
// (64 rows of 2048 f32; all rows of most decode batches).
constexpr int64_t kActPassBytes = 512 * 1024;
constexpr int64_t kMinPassRows = 4;

MatMulRowsFn RowsFn(const KernelTable& k, DType dtype) {
  switch (dtype) {
    case DType::kF32: return k.matmul_f32;
    case DType::kF16: return k.matmul_f16;
    case DType::kBF16: return k.matmul_bf16;
    case DType::kQ8_0: return k.matmul_q8_0;
    case DType::kQ4_0: return k.matmul_q4_0;
  }
  return nullptr;
}

}  // namespace

Status CheckWeightView(const WeightView& w) {
  if (w.rows < 0) return Status::InvalidArgument("weight has negative row count " + std::to_string(w.rows));
  auto bytes = RowBytes(w.dtype, w.cols);
  if (!bytes.ok()) return bytes.status().Wrap("weight row");
  if (w.data == nullptr && w.rows > 0 && w.cols > 0) return Status::InvalidArgument("weight has no data");
  return Status::Ok();
}

void MatMul(const WeightView& w, const float* x, int64_t n, float* y) {
  if (Status s = CheckWeightView(w); !s.ok()) {
    log::Error("MatMul on an invalid weight", {{"error", s.ToString()}});
    std::abort();
  }
  if (n <= 0 || w.rows == 0) return;
  const KernelTable& k = internal::ActiveKernels();
  MatMulArgs a{static_cast<const uint8_t*>(w.data), *RowBytes(w.dtype, w.cols), w.rows, w.cols, x, n, n, y};
  int64_t x_row_bytes = w.cols * static_cast<int64_t>(sizeof(float));

  if (IsQuantized(w.dtype)) {
    // Per calling thread, so concurrent callers never share it; grows to the
    // largest activation seen and stays.
    thread_local std::vector<ActBlock> act;
    const int64_t nb = w.cols / kQuantBlock;
    act.resize(static_cast<size_t>(n * nb));
    ActBlock* out = act.data();
    if (n * w.cols >= kMinParallelWork) {
      ParallelFor(n, [&](int64_t i) { k.quantize_act(x + i * w.cols, w.cols, out + i * nb); });
    } else {
      for (int64_t i = 0; i < n; ++i) k.quantize_act(x + i * w.cols, w.cols, out + i * nb);
    }
    a.x = out;
    x_row_bytes = nb * static_cast<int64_t>(sizeof(ActBlock));
  }
  if (x_row_bytes > 0) a.pass_rows = std::max<int64_t>(kMinPassRows, kActPassBytes / x_row_bytes);

  const MatMulRowsFn fn = RowsFn(k, w.dtype);
  const int64_t work = w.rows * w.cols * n;
  int64_t tasks = work < kMinParallelWork ? 1 : Threads() * kTasksPerThread;
  int64_t per_task = (w.rows + tasks - 1) / tasks;
  per_task = (per_task + kRowAlign - 1) / kRowAlign * kRowAlign;
  tasks = (w.rows + per_task - 1) / per_task;
  ParallelFor(tasks, [&](int64_t t) {
    const int64_t begin = t * per_task;
    const int64_t end = begin + per_task < w.rows ? begin + per_task : w.rows;
    fn(a, begin, end);
  });
}

}  // namespace flashroll::kernels
