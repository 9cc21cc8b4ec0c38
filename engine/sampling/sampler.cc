#include "engine/sampling/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engine/sampling/philox.h"
#include "engine/sampling/sampler_testing.h"

// FR_NO_FP_CONTRACT: the exp below must give the same bits on every path
// (scalar, SSE2, AVX2, AVX-512), so a * b + c is never fused into one
// rounding (GCC fuses by default in C++ wherever FMA exists, AVX-512F included).
// FR_ISA_CLONES: the vocabulary passes are compiled for AVX-512, AVX2 and the
// baseline and picked at load time; they use no FMA, so every clone computes
// the same bits.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define FR_NO_FP_CONTRACT
#elif defined(__GNUC__)
#define FR_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define FR_NO_FP_CONTRACT
#endif
#if defined(__x86_64__) && defined(__GNUC__) && (!defined(__clang__) || __clang_major__ >= 14)
#define FR_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FR_ISA_CLONES
#endif

namespace flashroll::engine {
namespace {

// top_k up to this keeps a heap; above, nth_element over the whole row.
constexpr int64_t kHeapMaxK = 512;
// Candidate sets this large are radix-sorted; smaller ones use std::sort.
constexpr size_t kRadixMinSize = 2048;
// The first top-p band: tokens weighing at least this much of the top token;
// each next band reaches this many times lower.
constexpr double kFirstBandWeight = 1e-3;
constexpr double kBandRatio = 10;
// Weights of tokens further than this below the top (in logit / T) are 0.
constexpr double kExpFloor = -707.0;
// Block sums cover this many consecutive ids.
constexpr int64_t kBlock = 64;

std::string FormatDouble(double v) {
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

// GCC vector types; casts between vector types of one size reinterpret bits.
using V2d = double __attribute__((vector_size(16)));
using V2u = uint64_t __attribute__((vector_size(16)));
using V8d = double __attribute__((vector_size(64)));
using V8u = uint64_t __attribute__((vector_size(64)));
using V8f = float __attribute__((vector_size(32)));
using V8i = int32_t __attribute__((vector_size(32)));
using V4f = float __attribute__((vector_size(16)));
using V4i = int32_t __attribute__((vector_size(16)));

// ---- exp ------------------------------------------------------------------
//
// exp(x) for x <= 0 as 2^k * e^r, k = round(x / ln 2), |r| <= ln2 / 2, e^r by
// its Taylor polynomial of degree 13 (truncation error < 1e-17 relative):
// within 1 ulp of the true value. Lanes with x < -707 or NaN give 0. Vectors
// go by reference: by value, a 32- or 64-byte vector has an ABI that differs
// with and without AVX (GCC's -Wpsabi).
template <typename D, typename U>
[[gnu::always_inline]] inline void Exp(const D& x, D* out) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kShift = 0x1.8p52;  // x * log2(e) + kShift rounds to an integer in the low bits
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 split so that k * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const D t = x * kLog2e + kShift;
  const D kd = t - kShift;
  const D r = (x - kd * kLn2Hi) - kd * kLn2Lo;
  D p = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const U k = (U)t - std::bit_cast<uint64_t>(kShift);
  *out = (D)(((U)p + (k << 52)) & (U)(x >= kExpFloor));
}

[[gnu::noinline]] FR_NO_FP_CONTRACT double ExpNonPositive(double x) {
  const V2d v = {x, x};
  V2d e;
  Exp<V2d, V2u>(v, &e);
  return e[0];
}

// The weight of a logit: exp((x - x_max) x inv_t). Every weight of the
// sampler is this value, whether computed alone or by ExpPass.
double Weight(float x, float x_max, double inv_t) {
  return ExpNonPositive((static_cast<double>(x) - static_cast<double>(x_max)) * inv_t);
}

// w[i] = Weight(x[i], x_max, inv_t) for i < n.
FR_ISA_CLONES FR_NO_FP_CONTRACT void ExpPass(const float* x, int64_t n, float x_max, double inv_t, double* w) {
  const double m = x_max;
  const int64_t n8 = n - n % 8;
  for (int64_t i = 0; i < n8; i += 8) {
    V8f xf;
    std::memcpy(&xf, x + i, sizeof(xf));
    const V8d d = (__builtin_convertvector(xf, V8d) - m) * inv_t;
    V8d e;
    Exp<V8d, V8u>(d, &e);
    std::memcpy(w + i, &e, sizeof(e));
  }
  for (int64_t i = n8; i < n; ++i) w[i] = Weight(x[i], x_max, inv_t);
}

// ---- block sums and the draw ------------------------------------------------

// w if it is kept (w >= min_weight), else 0.
inline double Kept(double w, double min_weight) { return w >= min_weight ? w : 0.0; }

// The sum of the kept entries of w[0, 64) by the fixed tree of the header.
[[gnu::always_inline]] inline double Block64(const double* w, double min_weight) {
  V8d v[8];
  for (int j = 0; j < 8; ++j) {
    std::memcpy(&v[j], w + 8 * j, sizeof(V8d));
    v[j] = (V8d)((V8u)v[j] & (V8u)(v[j] >= min_weight));
  }
  const V8d s = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// The sum of the kept entries of w[0, n): block sums in ascending order, the
// last block padded with zeros.
FR_ISA_CLONES double BlockSum(const double* w, int64_t n, double min_weight) {
  double total = 0;
  const int64_t full = n - n % kBlock;
  for (int64_t i = 0; i < full; i += kBlock) total += Block64(w + i, min_weight);
  if (full < n) {
    double tail[kBlock] = {};
    std::copy(w + full, w + n, tail);
    total += Block64(tail, min_weight);
  }
  return total;
}

// The index of the last kept entry of w[0, n) with a positive weight, or -1.
int64_t LastPositive(const double* w, int64_t n, double min_weight) {
  for (int64_t i = n - 1; i >= 0; --i) {
    if (Kept(w[i], min_weight) > 0) return i;
  }
  return -1;
}

// Inside the block where the running sum crosses `target` (from `cum`): the
// first entry at which the one-at-a-time running sum exceeds it, or, should
// rounding in the block disagree with its tree sum, the last positive entry.
int64_t DrawInBlock(const double* w, int64_t n, double min_weight, double cum, double target) {
  for (int64_t j = 0; j < n; ++j) {
    cum += Kept(w[j], min_weight);
    if (cum > target) return j;
  }
  return LastPositive(w, n, min_weight);
}

// The inverse CDF over the kept entries of w[0, n) in ascending index. It
// walks the blocks of BlockSum with the same running sum, so any target below
// BlockSum's total lands in a block. Otherwise (u x total rounded up to the
// total) the last positive entry; -1 when there is none.
FR_ISA_CLONES int64_t BlockDraw(const double* w, int64_t n, double min_weight, double target) {
  double cum = 0;
  const int64_t full = n - n % kBlock;
  for (int64_t i = 0; i < full; i += kBlock) {
    const double b = Block64(w + i, min_weight);
    if (cum + b > target) return i + DrawInBlock(w + i, kBlock, min_weight, cum, target);
    cum += b;
  }
  if (full < n) {
    double tail[kBlock] = {};
    std::copy(w + full, w + n, tail);
    if (cum + Block64(tail, min_weight) > target) return full + DrawInBlock(tail, n - full, min_weight, cum, target);
  }
  return LastPositive(w, n, min_weight);
}

// ---- ranks -------------------------------------------------------------------

// The index of the largest entry (NaN never wins), ties to the lower index;
// 0 when every entry is NaN or -inf. Eight lanes keep their first maximum.
FR_ISA_CLONES int64_t ArgMax(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t best = 0;
  float best_value = kNegInf;
  const int64_t n8 = n - n % 8;
  if (n8 > 0) {
    V8f lane_value = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
    V8i lane_index = {0, 0, 0, 0, 0, 0, 0, 0};
    V8i index = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int64_t i = 0; i < n8; i += 8) {
      V8f v;
      std::memcpy(&v, x + i, sizeof(v));
      const V8i greater = v > lane_value;
      lane_value = (V8f)(((V8i)v & greater) | ((V8i)lane_value & ~greater));
      lane_index = (index & greater) | (lane_index & ~greater);
      index += 8;
    }
    for (int j = 0; j < 8; ++j) {
      if (lane_value[j] > best_value || (lane_value[j] == best_value && lane_index[j] < best)) {
        best_value = lane_value[j];
        best = lane_index[j];
      }
    }
  }
  for (int64_t i = n8; i < n; ++i) {
    if (x[i] > best_value) {
      best_value = x[i];
      best = i;
    }
  }
  return best;
}

float Sanitized(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

// A token's rank key: rank order (descending logit, ties to the lower id) is
// ascending key order. The high 32 bits order the logit (NaN as -inf, -0 as
// +0), the low 32 bits are the id. Integer operations only: no branches.
uint64_t RankKey(float x, int64_t id) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  u = (u & 0x7fffffffu) > 0x7f800000u ? 0xff800000u : u;  // NaN -> -inf
  u = u == 0x80000000u ? 0u : u;                          // -0 -> +0
  const uint32_t ascending = u ^ ((0u - (u >> 31)) | 0x80000000u);
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(id);
}

int32_t IdOf(uint64_t key) { return static_cast<int32_t>(static_cast<uint32_t>(key)); }

// Whether any of x[0, 8) is > bound (AnyGreater), or in [lo, hi) (AnyInBand).
// On 16-byte vectors, which the baseline ISA has (wider GCC vectors are
// emulated lane by lane there).
bool AnyLane(const V4i& a, const V4i& b) {
  uint64_t lanes[2];
  const V4i any = a | b;
  std::memcpy(lanes, &any, sizeof(lanes));
  return (lanes[0] | lanes[1]) != 0;
}
bool AnyGreater(const float* x, float bound) {
  V4f a, b;
  std::memcpy(&a, x, sizeof(a));
  std::memcpy(&b, x + 4, sizeof(b));
  return AnyLane(a > bound, b > bound);
}
bool AnyInBand(const float* x, float lo, float hi) {
  V4f a, b;
  std::memcpy(&a, x, sizeof(a));
  std::memcpy(&b, x + 4, sizeof(b));
  return AnyLane((a >= lo) & (a < hi), (b >= lo) & (b < hi));
}

// Writes to c[n], c[n + 1], ... the rank keys of the tokens with
// lo <= x[i] < hi (NaN never), and with w[i] > 0 if positive_only, in
// ascending id; returns the new n. Branch-free per token (every token's key
// is written, only kept ones advance n), so c needs one spare slot.
size_t CollectBand(const float* x, const double* w, int64_t n_tokens, float lo, float hi, bool positive_only,
                   uint64_t* c, size_t n) {
  const auto take = [&](int64_t i) {
    c[n] = RankKey(x[i], i);
    n += static_cast<size_t>((x[i] >= lo) & (x[i] < hi) & (!positive_only | (w[i] > 0)));
  };
  int64_t i = 0;
  for (; i + 8 <= n_tokens; i += 8) {
    if (!AnyInBand(x + i, lo, hi)) continue;
    for (int64_t j = i; j < i + 8; ++j) take(j);
  }
  for (; i < n_tokens; ++i) take(i);
  return n;
}

// Stable LSD radix sort of rank keys on their high 32 bits (3 passes of 11,
// 11 and 10 bits; a pass whose digit is the same everywhere is skipped).
// Keys equal in rank keep their input order.
void RadixSortRanks(uint64_t* keys, size_t n, std::vector<uint64_t>* scratch) {
  constexpr int kShift[3] = {32, 43, 54};
  constexpr uint64_t kMask[3] = {0x7ff, 0x7ff, 0x3ff};
  std::array<std::array<uint32_t, 2048>, 3> counts{};
  for (size_t i = 0; i < n; ++i) {
    for (int p = 0; p < 3; ++p) ++counts[p][(keys[i] >> kShift[p]) & kMask[p]];
  }
  if (scratch->size() < n) scratch->resize(n);
  uint64_t* src = keys;
  uint64_t* dst = scratch->data();
  for (int p = 0; p < 3; ++p) {
    if (counts[p][(src[0] >> kShift[p]) & kMask[p]] == n) continue;
    uint32_t offset = 0;
    for (uint32_t& c : counts[p]) {
      const uint32_t count = c;
      c = offset;
      offset += count;
    }
    for (size_t i = 0; i < n; ++i) dst[counts[p][(src[i] >> kShift[p]) & kMask[p]]++] = src[i];
    std::swap(src, dst);
  }
  if (src != keys) std::copy(src, src + n, keys);
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) {
    return Status::InvalidArgument("temperature must be >= 0 and finite, got " + FormatDouble(p.temperature));
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return Status::InvalidArgument("top_p must be in (0, 1], got " + FormatDouble(p.top_p));
  }
  if (!(p.min_p >= 0 && p.min_p <= 1)) {
    return Status::InvalidArgument("min_p must be in [0, 1], got " + FormatDouble(p.min_p));
  }
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) {
    return Status::InvalidArgument("repetition_penalty must be > 0 and finite, got " +
                                   FormatDouble(p.repetition_penalty));
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) {
    return Status::InvalidArgument("presence_penalty must be in [-2, 2], got " + FormatDouble(p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    return Status::InvalidArgument("frequency_penalty must be in [-2, 2], got " + FormatDouble(p.frequency_penalty));
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return Status::InvalidArgument("top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " +
                                   std::to_string(p.top_logprobs));
  }
  return Status::Ok();
}

Sampler::Sampler(int64_t vocab_size)
    : vocab_size_(vocab_size), weights_(static_cast<size_t>(vocab_size)), top_heap_(kMaxTopLogprobs) {}

const float* Sampler::ApplyPenalties(const float* logits, const SamplingParams& params,
                                     std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const bool repetition = params.repetition_penalty != 1.0;
  const bool additive = params.presence_penalty != 0.0 || params.frequency_penalty != 0.0;
  if (!(repetition && (!prompt.empty() || !output.empty())) && !(additive && !output.empty())) return logits;

  if (penalised_.empty()) {
    penalised_.resize(static_cast<size_t>(vocab_size_));
    output_counts_.assign(static_cast<size_t>(vocab_size_), 0);
    seen_.assign(static_cast<size_t>(vocab_size_), 0);
  }
  touched_.clear();
  const auto mark = [&](int32_t token) {
    if (token < 0 || token >= vocab_size_) return false;
    if (!seen_[token]) {
      seen_[token] = 1;
      touched_.push_back(token);
    }
    return true;
  };
  if (repetition) {
    for (int32_t token : prompt) mark(token);
  }
  for (int32_t token : output) {
    if (mark(token)) ++output_counts_[token];
  }

  std::memcpy(penalised_.data(), logits, static_cast<size_t>(vocab_size_) * sizeof(float));
  for (int32_t token : touched_) {
    double v = logits[token];
    if (repetition) v = v > 0 ? v / params.repetition_penalty : v * params.repetition_penalty;
    const int32_t count = output_counts_[token];
    v -= params.frequency_penalty * count;
    if (count > 0) v -= params.presence_penalty;
    penalised_[token] = static_cast<float>(v);
    seen_[token] = 0;
    output_counts_[token] = 0;
  }
  return penalised_.data();
}

int64_t Sampler::SelectTopK(const float* x, int64_t k, uint64_t* out) {
  if (k <= kHeapMaxK) {
    // A max-heap of the k best keys so far: its front is the worst of them.
    // A later token (higher id) displaces it only with a strictly higher
    // logit, so most blocks of 8 are dismissed by one vector compare.
    for (int64_t i = 0; i < k; ++i) out[i] = RankKey(x[i], i);
    std::make_heap(out, out + k);
    float worst = Sanitized(x[IdOf(out[0])]);
    const auto offer = [&](int64_t i) {
      if (x[i] > worst) {
        std::pop_heap(out, out + k);
        out[k - 1] = RankKey(x[i], i);
        std::push_heap(out, out + k);
        worst = Sanitized(x[IdOf(out[0])]);
      }
    };
    int64_t i = k;
    for (; i % 8 != 0 && i < vocab_size_; ++i) offer(i);
    for (; i + 8 <= vocab_size_; i += 8) {
      if (AnyGreater(x + i, worst)) {
        for (int64_t j = i; j < i + 8; ++j) offer(j);
      }
    }
    for (; i < vocab_size_; ++i) offer(i);
    return k;
  }
  // Find the k-th key, then collect the keys up to it in ascending id (which
  // SortCandidates' radix sort relies on).
  for (int64_t i = 0; i < vocab_size_; ++i) out[i] = RankKey(x[i], i);
  std::nth_element(out, out + (k - 1), out + vocab_size_);
  const uint64_t kth = out[k - 1];
  int64_t n = 0;
  for (int64_t i = 0; i < vocab_size_; ++i) {
    const uint64_t key = RankKey(x[i], i);
    out[n] = key;
    n += key <= kth;
  }
  return n;
}

void Sampler::SortCandidates(size_t begin, size_t end) {
  // Precondition for the radix path: candidates_[begin, end) is in ascending
  // id, as every set of kRadixMinSize or more is built.
  if (end - begin < kRadixMinSize) {
    std::sort(candidates_.data() + begin, candidates_.data() + end);
  } else {
    RadixSortRanks(candidates_.data() + begin, end - begin, &radix_scratch_);
  }
}

void Sampler::KeepOnly(size_t n) {
  kept_weights_.clear();
  for (size_t j = 0; j < n; ++j) kept_weights_.push_back(weights_[IdOf(candidates_[j])]);
  std::fill(weights_.begin(), weights_.end(), 0.0);
  for (size_t j = 0; j < n; ++j) weights_[IdOf(candidates_[j])] = kept_weights_[j];
}

bool Sampler::NucleusIn(size_t begin, size_t end, double target, double* cum) {
  SortCandidates(begin, end);
  for (size_t j = begin; j < end; ++j) {
    *cum += weights_[IdOf(candidates_[j])];
    if (*cum >= target) {
      KeepOnly(j + 1);
      return true;
    }
  }
  return false;
}

void Sampler::KeepTruncated(const float* proc, float proc_max, float shift, bool weights_ready,
                            const SamplingParams& params) {
  const double temperature = params.temperature;
  const double inv_t = 1.0 / temperature;
  const bool top_k = params.top_k > 0 && params.top_k < vocab_size_;
  const bool top_p = params.top_p < 1.0;
  double* w = weights_.data();
  // One slot more than the vocabulary: the branch-free scans below write
  // every token and advance only past the ones they keep.
  const size_t slots = static_cast<size_t>(vocab_size_) + 1;
  if (candidates_.size() < slots) candidates_.resize(slots);
  uint64_t* c = candidates_.data();

  size_t num_top_k = 0;
  if (top_k) {
    num_top_k = static_cast<size_t>(SelectTopK(proc, params.top_k, c));
    if (!weights_ready) {
      for (size_t j = 0; j < num_top_k; ++j) w[IdOf(c[j])] = Weight(proc[IdOf(c[j])], shift, inv_t);
    }
    KeepOnly(num_top_k);
  } else if (!weights_ready) {
    ExpPass(proc, vocab_size_, shift, inv_t, w);
  }
  if (!top_p) return;

  const double total = BlockSum(w, vocab_size_, 0.0);
  const double target = params.top_p * total;
  double cum = 0;
  if (top_k) {
    NucleusIn(0, num_top_k, target, &cum);
    return;  // unreached (rounding): the whole top-k set stays
  }

  // Top-p over the vocabulary, one band of logits at a time, each ranked
  // entirely after the bands before it, so that sorting band by band and
  // carrying the cumulative on gives the rank-order cumulative; the bands
  // only decide how much gets sorted, never the result. The first band holds
  // the tokens weighing at least kFirstBandWeight of the top one (where the
  // nucleus usually ends); each next one reaches kBandRatio times lower,
  // down to a weight of (1 - top_p) / 2 x total / vocabulary (all lighter
  // tokens together cannot make up what the nucleus may leave out); the
  // last band is the rest with a positive weight.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float deepest = std::min(
      static_cast<float>(proc_max + temperature * std::log(kFirstBandWeight)),
      static_cast<float>(shift + temperature * std::log(0.5 * (1.0 - params.top_p) * total /
                                                        static_cast<double>(vocab_size_))));
  const float step = static_cast<float>(temperature * std::log(kBandRatio));
  float upper = kInf;
  float lower = static_cast<float>(proc_max + temperature * std::log(kFirstBandWeight));
  size_t n = 0;
  for (;;) {
    const bool last = lower == -kInf;
    const size_t begin = n;
    n = CollectBand(proc, w, vocab_size_, lower, upper, /*positive_only=*/last, c, n);
    if (NucleusIn(begin, n, target, &cum)) return;
    if (last) break;
    upper = lower;
    const float next = std::max(deepest, lower - step);
    lower = lower > deepest && next < lower ? next : -kInf;  // a step too small to move ends the bands too
  }
  // Unreached (rounding): every token stays.
}

double Sampler::RawPass(const float* logits, double inv_t, int64_t* argmax) {
  *argmax = ArgMax(logits, vocab_size_);
  ExpPass(logits, vocab_size_, logits[*argmax], inv_t, weights_.data());
  return std::log(BlockSum(weights_.data(), vocab_size_, 0.0));
}

Sampler::Truncation Sampler::Truncate(const float* logits, const float* proc, int64_t raw_argmax,
                                      const SamplingParams& params) {
  // weights_ holds the raw weights, exp((l - l_max) / T). Without penalties
  // they are the draw's weights too. With penalties whose top stays at or
  // below l_max, weights shifted by l_max differ only at the penalised
  // tokens, so only those are recomputed; above it (negative penalties), all
  // are, shifted by the new top so that no weight overflows.
  const double inv_t = 1.0 / params.temperature;
  const float raw_max = logits[raw_argmax];
  Truncation t{raw_max, raw_max, 1.0};
  bool weights_ready = true;
  if (proc != logits) {
    t.top = proc[ArgMax(proc, vocab_size_)];
    if (t.top > raw_max) {
      t.shift = t.top;
      weights_ready = false;
    } else {
      for (int32_t token : touched_) weights_[token] = Weight(proc[token], t.shift, inv_t);
    }
  }
  KeepTruncated(proc, t.top, t.shift, weights_ready, params);
  t.min_weight = params.min_p * Weight(t.top, t.shift, inv_t);
  return t;
}

SampledToken Sampler::Sample(const float* logits, const SamplingParams& params, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, uint64_t choice_index, uint64_t token_index) {
  SampledToken out;
  const bool greedy = !(params.temperature > 0);
  const double raw_inv_t = greedy ? 1.0 : 1.0 / params.temperature;
  const float* proc = ApplyPenalties(logits, params, prompt, output);

  int64_t raw_argmax = 0;
  const double raw_log_sum = RawPass(logits, raw_inv_t, &raw_argmax);
  const float raw_max = logits[raw_argmax];
  const auto raw_logprob = [&](int64_t token) {
    return static_cast<float>((static_cast<double>(logits[token]) - static_cast<double>(raw_max)) * raw_inv_t -
                              raw_log_sum);
  };

  double processed = 0;  // greedy: drawn with probability 1
  if (greedy) {
    out.token = static_cast<int32_t>(proc != logits ? ArgMax(proc, vocab_size_) : raw_argmax);
  } else {
    const Truncation t = Truncate(logits, proc, raw_argmax, params);
    const double* w = weights_.data();
    const double total = BlockSum(w, vocab_size_, t.min_weight);
    const double u = UniformDouble(params.seed, choice_index, token_index);
    int64_t token = BlockDraw(w, vocab_size_, t.min_weight, u * total);
    if (token < 0) token = ArgMax(proc, vocab_size_);  // no positive weight: NaN or +inf logits
    out.token = static_cast<int32_t>(token);
    processed = (static_cast<double>(proc[token]) - static_cast<double>(t.shift)) * raw_inv_t - std::log(total);
  }
  out.logprob = raw_logprob(out.token);
  out.processed_logprob =
      params.processed_logprobs ? static_cast<float>(processed) : std::numeric_limits<float>::quiet_NaN();

  if (params.top_logprobs > 0) {
    const int64_t n = std::min<int64_t>(std::min(params.top_logprobs, kMaxTopLogprobs), vocab_size_);
    uint64_t* keys = top_heap_.data();
    SelectTopK(logits, n, keys);
    std::sort(keys, keys + n);
    out.top.reserve(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) out.top.push_back({IdOf(keys[j]), raw_logprob(IdOf(keys[j]))});
  }
  return out;
}

double TEST_SamplerRawWeightSum(const float* logits, int64_t vocab, double inv_t) {
  std::vector<double> weights(static_cast<size_t>(vocab));
  ExpPass(logits, vocab, logits[ArgMax(logits, vocab)], inv_t, weights.data());
  return BlockSum(weights.data(), vocab, 0.0);
}

bool Sampler::DrawsOnDevice(const SamplingParams& p) {
  return p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 && p.top_k <= 0 &&
         p.top_p >= 1.0 && p.min_p == 0.0 && p.top_logprobs == 0;
}

DeviceDrawPlan Sampler::PlanDeviceDraw(const SamplingParams& p, uint64_t choice_index, uint64_t token_index) {
  DeviceDrawPlan plan;
  plan.greedy = !(p.temperature > 0);
  if (plan.greedy) return plan;
  plan.inv_t = 1.0 / p.temperature;
  plan.u = UniformDouble(p.seed, choice_index, token_index);
  return plan;
}

SampledToken Sampler::FinishDeviceDraw(const DeviceDraw& draw, const SamplingParams& p) {
  // Sample's formulas with its RawPass sum; with no truncation the draw's
  // total is that same sum and its shift the raw top.
  const bool greedy = !(p.temperature > 0);
  const double inv_t = greedy ? 1.0 : 1.0 / p.temperature;
  const double log_sum = std::log(draw.weight_sum);
  const double logprob =
      (static_cast<double>(draw.token_logit) - static_cast<double>(draw.max_logit)) * inv_t - log_sum;
  SampledToken out;
  out.token = draw.token;
  out.logprob = static_cast<float>(logprob);
  out.processed_logprob = !p.processed_logprobs ? std::numeric_limits<float>::quiet_NaN()
                          : greedy              ? 0.0f
                                                : static_cast<float>(logprob);
  return out;
}

SampledToken Sampler::Score(const float* logits, double temperature, int32_t token, int32_t top_logprobs,
                            float* vocab_logprobs) {
  // The same raw pass and formula as Sample, so the bits agree.
  const double raw_inv_t = temperature > 0 ? 1.0 / temperature : 1.0;
  int64_t raw_argmax = 0;
  const double raw_log_sum = RawPass(logits, raw_inv_t, &raw_argmax);
  const float raw_max = logits[raw_argmax];
  const auto raw_logprob = [&](int64_t id) {
    return static_cast<float>((static_cast<double>(logits[id]) - static_cast<double>(raw_max)) * raw_inv_t -
                              raw_log_sum);
  };
  SampledToken out;
  out.token = token;
  out.logprob = raw_logprob(token);
  out.processed_logprob = std::numeric_limits<float>::quiet_NaN();
  if (top_logprobs > 0) {
    const int64_t n = std::min<int64_t>(std::min(top_logprobs, kMaxTopLogprobs), vocab_size_);
    uint64_t* keys = top_heap_.data();
    SelectTopK(logits, n, keys);
    std::sort(keys, keys + n);
    for (int64_t j = 0; j < n; ++j) out.top.push_back({IdOf(keys[j]), raw_logprob(IdOf(keys[j]))});
  }
  if (vocab_logprobs) {
    for (int64_t i = 0; i < vocab_size_; ++i) vocab_logprobs[i] = raw_logprob(i);
  }
  return out;
}

std::vector<int32_t> Sampler::TEST_KeptTokens(const float* logits, const SamplingParams& params,
                                              std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const float* proc = ApplyPenalties(logits, params, prompt, output);
  int64_t raw_argmax = 0;
  (void)RawPass(logits, 1.0 / params.temperature, &raw_argmax);
  const Truncation t = Truncate(logits, proc, raw_argmax, params);
  std::vector<int32_t> kept;
  for (int64_t i = 0; i < vocab_size_; ++i) {
    if (Kept(weights_[i], t.min_weight) > 0) kept.push_back(static_cast<int32_t>(i));
  }
  return kept;
}

}  // namespace flashroll::engine
