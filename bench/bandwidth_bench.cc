// The machine's memory-read bandwidth: the bound that a decode step, which
// reads every weight once per token, cannot beat. N threads each sum their
// slice of one buffer far larger than the caches (1 GiB by default) with
// 64-byte loads; a pass ends when the slowest thread is done, and the figure
// is the median pass (GB/s = 1e9 bytes/s).
//
//   build/bench/bandwidth_bench [--threads N] [--size-mib M] [--passes P]
//                               [--no-hugepages] [--json]
//
// --threads defaults to every core. Pages are touched first by the thread
// that reads them and, unless --no-hugepages, backed by transparent huge pages
// where the kernel gives them (fewer TLB misses: a slightly higher, so
// stricter, bound). scripts/bench_decode_vs_llama.sh runs it beside the
// engines, with the same thread count, in the same run.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

volatile uint64_t g_sink;  // keeps the sums alive

__attribute__((target("avx512f"))) uint64_t SumAvx512(const uint8_t* p, size_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const uint8_t* end = p + (bytes & ~size_t{511});
  for (; p < end; p += 512) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + 0));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + 192));
    a4 = _mm512_add_epi64(a4, _mm512_load_si512(p + 256));
    a5 = _mm512_add_epi64(a5, _mm512_load_si512(p + 320));
    a6 = _mm512_add_epi64(a6, _mm512_load_si512(p + 384));
    a7 = _mm512_add_epi64(a7, _mm512_load_si512(p + 448));
  }
  a0 = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)),
                        _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a0);  // not _mm512_reduce_add_epi64: GCC 12 warns inside it
  uint64_t s = 0;
  for (uint64_t v : lanes) s += v;
  return s;
}

__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const uint8_t* end = p + (bytes & ~size_t{255});
  for (; p < end; p += 256) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 0)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 96)));
    a4 = _mm256_add_epi64(a4, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 128)));
    a5 = _mm256_add_epi64(a5, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 160)));
    a6 = _mm256_add_epi64(a6, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 192)));
    a7 = _mm256_add_epi64(a7, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 224)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                        _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t SumScalar(const uint8_t* p, size_t bytes) {
  uint64_t a[8] = {};
  const auto* q = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i + 8 <= bytes / 8; i += 8) {
    for (int k = 0; k < 8; ++k) a[k] += q[i + k];
  }
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "bandwidth_bench: %s\n", why);
  std::fprintf(stderr,
               "usage: bandwidth_bench [--threads N] [--size-mib M] [--passes P] [--no-hugepages] [--json]\n");
  std::exit(2);
}

long ParsePositive(const char* flag, const char* value) {
  if (value == nullptr) Usage((std::string(flag) + " needs a value").c_str());
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v <= 0) Usage((std::string(flag) + ": '" + value + "' is not a positive integer").c_str());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  size_t size_mib = 1024;
  int passes = 9;
  bool hugepages = true;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--threads") {
      threads = static_cast<int>(ParsePositive("--threads", next)), ++i;
    } else if (a == "--size-mib") {
      size_mib = static_cast<size_t>(ParsePositive("--size-mib", next)), ++i;
    } else if (a == "--passes") {
      passes = static_cast<int>(ParsePositive("--passes", next)), ++i;
    } else if (a == "--no-hugepages") {
      hugepages = false;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: bandwidth_bench [--threads N] [--size-mib M] [--passes P] [--no-hugepages] [--json]\n");
      return 0;
    } else {
      Usage(("unknown flag '" + a + "'").c_str());
    }
  }

  const size_t bytes = size_mib << 20;
  constexpr size_t kAlign = 2 << 20;
  void* mem = std::aligned_alloc(kAlign, bytes);
  if (mem == nullptr) Usage("cannot allocate the buffer");
  if (hugepages) ::madvise(mem, bytes, MADV_HUGEPAGE);
  auto* buf = static_cast<uint8_t*>(mem);

  __builtin_cpu_init();
  const char* isa = __builtin_cpu_supports("avx512f") ? "avx512" : __builtin_cpu_supports("avx2") ? "avx2" : "scalar";
  uint64_t (*sum)(const uint8_t*, size_t) =
      isa[4] == '5' ? SumAvx512 : isa[0] == 'a' ? SumAvx2 : SumScalar;

  // Thread t reads [t * slice, (t + 1) * slice); slices are 2 MiB multiples.
  const size_t slice = (bytes / static_cast<size_t>(threads)) & ~(kAlign - 1);
  if (slice == 0) Usage("buffer too small for the thread count");
  std::barrier sync(threads);
  std::vector<double> seconds(static_cast<size_t>(passes));
  std::atomic<uint64_t> total{0};
  auto worker = [&](int t) {
    uint8_t* p = buf + static_cast<size_t>(t) * slice;
    for (size_t i = 0; i < slice; i += 4096) std::memset(p + i, static_cast<int>((i >> 12) + 1), 4096);
    uint64_t s = 0;
    sync.arrive_and_wait();
    s += sum(p, slice);  // warm-up pass: faults, TLB, frequency
    for (int pass = 0; pass < passes; ++pass) {
      sync.arrive_and_wait();
      const Clock::time_point t0 = Clock::now();
      s += sum(p, slice);
      sync.arrive_and_wait();
      if (t == 0) seconds[static_cast<size_t>(pass)] = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    total += s;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& th : pool) th.join();
  g_sink = total.load();

  const double read = static_cast<double>(slice) * threads;
  std::vector<double> gbps;
  for (double s : seconds) gbps.push_back(read / s / 1e9);
  std::vector<double> sorted = gbps;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                          : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  if (json) {
    std::printf("{\"threads\": %d, \"buffer_bytes\": %.0f, \"passes\": %d, \"isa\": \"%s\", \"hugepages\": %s, "
                "\"gb_per_s\": %.2f, \"gb_per_s_min\": %.2f, \"gb_per_s_max\": %.2f, \"per_pass\": [",
                threads, read, passes, isa, hugepages ? "true" : "false", median, sorted.front(), sorted.back());
    for (size_t i = 0; i < gbps.size(); ++i) std::printf("%s%.2f", i ? ", " : "", gbps[i]);
    std::printf("]}\n");
  } else {
    std::printf("read bandwidth, %d thread(s), %.0f MiB, %s: median %.2f GB/s (min %.2f, max %.2f, %d passes)\n",
                threads, read / (1 << 20), isa, median, sorted.front(), sorted.back(), passes);
  }
  std::free(mem);
  return 0;
}
