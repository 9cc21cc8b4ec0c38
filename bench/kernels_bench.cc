// Benchmarks of the CPU kernels: MatMul per weight dtype, as a decode
// matrix-vector product (n = 1, reported as weight GB/s) and as a batched
// product (n = 32, reported as GFLOP/s and weight GB/s), on 1 and 2 threads.
//
// Each benchmark cycles through copies of its weight matrix that together
// exceed the last-level cache, so weights stream from DRAM as they do in a
// forward pass; the "hot" variants reuse one copy (cache-resident).
//
//   build-kern/bench/kernels_bench --benchmark_filter=MatVec
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/cpu_isa.h"
#include "engine/kernels/cpu_threads.h"
#include "engine/kernels/dtype.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quantize.h"

namespace flashroll::kernels {
namespace {

// Larger than the L3 of the machines we run on (32 MiB per Zen 4 CCD).
constexpr int64_t kColdBytes = 256 << 20;

struct Shape {
  int64_t rows;
  int64_t cols;
};

// `copies` identical weight matrices back to back.
std::vector<uint8_t> MakeWeights(DType dtype, Shape s, int64_t copies) {
  const int64_t row_bytes = *RowBytes(dtype, s.cols);
  std::vector<uint8_t> data(static_cast<size_t>(row_bytes * s.rows * copies));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(s.cols));
  for (int64_t r = 0; r < s.rows; ++r) {
    for (float& v : row) v = dist(rng);
    if (!QuantizeRow(dtype, row.data(), s.cols, data.data() + r * row_bytes).ok()) std::abort();
  }
  const size_t one = static_cast<size_t>(row_bytes * s.rows);
  for (int64_t c = 1; c < copies; ++c) std::memcpy(data.data() + c * one, data.data(), one);
  return data;
}

void RunMatMul(benchmark::State& state, DType dtype, Shape s, int64_t n, int threads, bool cold) {
  SetThreads(threads);
  const int64_t matrix_bytes = *RowBytes(dtype, s.cols) * s.rows;
  const int64_t copies = cold ? (kColdBytes + matrix_bytes - 1) / matrix_bytes : 1;
  const std::vector<uint8_t> weights = MakeWeights(dtype, s, copies);
  std::vector<float> x(static_cast<size_t>(n * s.cols));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(n * s.rows));
  int64_t copy = 0;
  for (auto _ : state) {
    const WeightView w{dtype, weights.data() + copy * matrix_bytes, s.rows, s.cols};
    MatMul(w, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    copy = copy + 1 == copies ? 0 : copy + 1;
  }
  state.SetBytesProcessed(state.iterations() * matrix_bytes);
  state.counters["GFLOPS"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * s.rows * s.cols * n / 1e9,
                                                benchmark::Counter::kIsRate);
  state.SetLabel(IsaName(ActiveIsa()));
  SetThreads(2);
}

void RegisterAll() {
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  // SmolLM-135M's MLP (hidden 576, intermediate 1536) both ways, and a 2048^2 layer.
  const Shape shapes[] = {{1536, 576}, {576, 1536}, {2048, 2048}};
  for (const bool cold : {true, false}) {
    for (const int64_t n : {int64_t{1}, int64_t{32}}) {
      for (const DType dtype : dtypes) {
        for (const Shape s : shapes) {
          for (const int threads : {1, 2}) {
            const std::string name = std::string(n == 1 ? "MatVec" : "MatMul32") + (cold ? "" : "Hot") + "/" +
                                     DTypeName(dtype) + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                                     "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
              RunMatMul(st, dtype, s, n, threads, cold);
            })->UseRealTime()->Unit(benchmark::kMicrosecond);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace flashroll::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  flashroll::kernels::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
