// Tests of engine/sampling: Philox known answers, the sampler's raw and
// processed logprobs against double-precision references, exact top-k /
// top-p / min-p masks, empirical frequencies against the target
// distribution, determinism, validation, and a timing report on a
// 49,152-entry vocabulary.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/sampling/philox.h"
#include "engine/sampling/sampler.h"

namespace flashroll::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

std::vector<float> RandomLogits(uint32_t seed, int64_t n, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// log_softmax(x / T) in double with libm, the naive way.
std::vector<double> RefLogSoftmax(const std::vector<float>& x, double temperature) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : x) m = std::max(m, static_cast<double>(v));
  double sum = 0;
  for (float v : x) sum += std::exp((v - m) / temperature);
  std::vector<double> out;
  for (float v : x) out.push_back((v - m) / temperature - std::log(sum));
  return out;
}

// The probability of each token under `params` after truncation, computed
// the naive way: full sort, sequential sums, libm exp. No penalties.
// Token ids by descending logit, ties to the lower id.
std::vector<int> RankOrder(const std::vector<float>& logits) {
  std::vector<std::pair<float, int>> pairs;
  for (size_t i = 0; i < logits.size(); ++i) pairs.push_back({-logits[i], static_cast<int>(i)});
  std::sort(pairs.begin(), pairs.end());
  std::vector<int> order;
  for (const auto& pair : pairs) order.push_back(pair.second);
  return order;
}

// `order`: RankOrder(logits), when the caller has it.
std::vector<double> RefDistribution(const std::vector<float>& logits, const SamplingParams& p,
                                    const std::vector<int>* order_in = nullptr) {
  const int n = static_cast<int>(logits.size());
  std::vector<double> prob = RefLogSoftmax(logits, p.temperature);
  for (double& v : prob) v = std::exp(v);
  const std::vector<int> order = order_in != nullptr ? *order_in : RankOrder(logits);
  int limit = n;
  if (p.top_k > 0 && p.top_k < n) limit = p.top_k;
  if (p.top_p < 1) {
    double total = 0;
    for (int i = 0; i < limit; ++i) total += prob[order[i]];
    double cum = 0;
    for (int i = 0; i < limit; ++i) {
      cum += prob[order[i]];
      if (cum >= p.top_p * total) {
        limit = i + 1;
        break;
      }
    }
  }
  std::vector<bool> kept(n, false);
  for (int i = 0; i < limit; ++i) kept[order[i]] = true;
  const double max_prob = prob[order[0]];
  double total = 0;
  for (int i = 0; i < n; ++i) {
    if (prob[i] < p.min_p * max_prob || prob[i] == 0) kept[i] = false;
    if (kept[i]) total += prob[i];
  }
  std::vector<double> dist(n, 0.0);
  for (int i = 0; i < n; ++i) {
    if (kept[i]) dist[i] = prob[i] / total;
  }
  return dist;
}

int ArgMaxRef(const std::vector<float>& x) {
  return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
}

std::vector<int32_t> Support(const std::vector<double>& dist) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] > 0) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

// Eight tokens whose softmax is, in descending order, .30 .22 .16 .12 .08
// .05 .04 .03, spread over the ids so that probability order and id order
// differ.
std::vector<float> EightTokenLogits() {
  const double probs[] = {0.30, 0.22, 0.16, 0.12, 0.08, 0.05, 0.04, 0.03};
  const int ids[] = {5, 2, 7, 0, 3, 6, 1, 4};
  std::vector<float> logits(8);
  for (int r = 0; r < 8; ++r) logits[ids[r]] = static_cast<float>(std::log(probs[r]));
  return logits;
}

// Draws `draws` tokens (token_index 0..draws-1) and counts them.
std::vector<int> Histogram(Sampler& sampler, const std::vector<float>& logits, const SamplingParams& params,
                           int draws, std::span<const int32_t> prompt = {}, std::span<const int32_t> output = {}) {
  std::vector<int> counts(logits.size(), 0);
  for (int t = 0; t < draws; ++t) {
    const SampledToken s = sampler.Sample(logits.data(), params, prompt, output, 0, static_cast<uint64_t>(t));
    EXPECT_GE(s.token, 0);
    EXPECT_LT(s.token, static_cast<int32_t>(logits.size()));
    ++counts[s.token];
  }
  return counts;
}

// Every count within 5 sigma of its binomial expectation, nothing outside
// the support, and Pearson's chi-square below the 1e-6 tail for its degrees
// of freedom (bounded generously by 3 x dof + 25).
void ExpectMatchesDistribution(const std::vector<int>& counts, const std::vector<double>& dist, int draws) {
  double chi2 = 0;
  int dof = -1;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
      continue;
    }
    const double expected = draws * dist[i];
    const double sigma = std::sqrt(draws * dist[i] * (1 - dist[i]));
    EXPECT_LE(std::abs(counts[i] - expected), 5 * sigma + 1e-9) << "token " << i;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++dof;
  }
  EXPECT_LT(chi2, 3.0 * std::max(dof, 1) + 25.0);
}

// ---- Philox ----------------------------------------------------------------

TEST(Philox, RandomTwoThreeKnownAnswers) {
  using Block = std::array<uint32_t, 4>;
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}), (Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformDoubleIsA53BitUniformPerStream) {
  constexpr int kN = 20000;
  double sum = 0;
  for (int i = 0; i < kN; ++i) {
    const double u = UniformDouble(42, 7, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    EXPECT_EQ(u * 0x1.0p53, std::floor(u * 0x1.0p53));  // a multiple of 2^-53
    sum += u;
  }
  EXPECT_NEAR(sum / kN, 0.5, 5 * std::sqrt(1.0 / 12 / kN));
  // The layout the header documents: key = seed, counter = (index, stream).
  const auto x = Philox4x32({3, 0, 2, 0}, {1, 0});
  const uint64_t word = (static_cast<uint64_t>(x[1]) << 32) | x[0];
  EXPECT_EQ(UniformDouble(1, 2, 3), static_cast<double>(word >> 11) * 0x1.0p-53);
  EXPECT_EQ(UniformDouble(1, 2, 3), UniformDouble(1, 2, 3));
  EXPECT_NE(UniformDouble(1, 2, 3), UniformDouble(1, 3, 3));
  EXPECT_NE(UniformDouble(1, 2, 3), UniformDouble(2, 2, 3));
  EXPECT_NE(UniformDouble(1, 2, 3), UniformDouble(1, 2, 4));
  EXPECT_NE(UniformDouble(1ull << 32, 0, 0), UniformDouble(0, 0, 0));  // all 64 seed bits count
  EXPECT_NE(UniformDouble(0, 1ull << 32, 0), UniformDouble(0, 0, 0));
  EXPECT_NE(UniformDouble(0, 0, 1ull << 32), UniformDouble(0, 0, 0));
}

// ---- validation ------------------------------------------------------------

TEST(SamplerValidation, ErrorsNameTheFieldAndValue) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  const auto message = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    const Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    return s.message();
  };
  EXPECT_EQ(message([](SamplingParams& p) { p.top_p = 1.5; }), "top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_p = 0; }), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = -1; }), "temperature must be >= 0 and finite, got -1");
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = std::nan(""); }).find("temperature"), 0u);
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = INFINITY; }).find("temperature"), 0u);
  EXPECT_EQ(message([](SamplingParams& p) { p.min_p = 1.25; }), "min_p must be in [0, 1], got 1.25");
  EXPECT_EQ(message([](SamplingParams& p) { p.repetition_penalty = 0; }),
            "repetition_penalty must be > 0 and finite, got 0");
  EXPECT_EQ(message([](SamplingParams& p) { p.presence_penalty = 2.5; }),
            "presence_penalty must be in [-2, 2], got 2.5");
  EXPECT_EQ(message([](SamplingParams& p) { p.frequency_penalty = -3; }),
            "frequency_penalty must be in [-2, 2], got -3");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_logprobs = 21; }), "top_logprobs must be in [0, 20], got 21");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_logprobs = -1; }), "top_logprobs must be in [0, 20], got -1");
  SamplingParams edges;
  edges.temperature = 0;
  edges.top_k = -1;
  edges.top_p = 1e-9;
  edges.min_p = 1;
  edges.presence_penalty = -2;
  edges.frequency_penalty = 2;
  edges.top_logprobs = 20;
  EXPECT_TRUE(ValidateSamplingParams(edges).ok());
}

// ---- logprobs --------------------------------------------------------------

// The device draw (engine/cuda) computes only the plain sampler: each
// parameter that needs more keeps its rows on the host sampler, and a plan
// carries Sample's own uniform draw.
TEST(SamplerDeviceDraw, OnlyPlainParametersDrawOnTheDevice) {
  SamplingParams plain;
  plain.temperature = 0.8;
  plain.processed_logprobs = true;
  EXPECT_TRUE(Sampler::DrawsOnDevice(plain));
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_TRUE(Sampler::DrawsOnDevice(greedy));
  const auto refused = [&](auto change) {
    SamplingParams p = plain;
    change(p);
    return !Sampler::DrawsOnDevice(p);
  };
  EXPECT_TRUE(refused([](SamplingParams& p) { p.repetition_penalty = 1.1; }));
  EXPECT_TRUE(refused([](SamplingParams& p) { p.presence_penalty = 0.5; }));
  EXPECT_TRUE(refused([](SamplingParams& p) { p.frequency_penalty = -0.5; }));
  EXPECT_TRUE(refused([](SamplingParams& p) { p.top_k = 40; }));
  EXPECT_TRUE(refused([](SamplingParams& p) { p.top_p = 0.9; }));
  EXPECT_TRUE(refused([](SamplingParams& p) { p.min_p = 0.05; }));
  EXPECT_TRUE(refused([](SamplingParams& p) { p.top_logprobs = 1; }));
  plain.seed = 99;
  const DeviceDrawPlan plan = Sampler::PlanDeviceDraw(plain, 2, 7);
  EXPECT_FALSE(plan.greedy);
  EXPECT_EQ(plan.inv_t, 1.0 / 0.8);
  EXPECT_EQ(plan.u, UniformDouble(99, 2, 7));
  EXPECT_TRUE(Sampler::PlanDeviceDraw(greedy, 2, 7).greedy);
}

// FinishDeviceDraw turns what the device sums (the token's logit, the row's
// top, the sum of the weights; here summed plainly in double, so the
// logprob agrees to rounding, not bitwise: cuda_draw_test checks the bits)
// into Sample's token, logprob and processed logprob.
TEST(SamplerDeviceDraw, FinishedGreedyDrawKeepsTheTokenAndItsLogprob) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f};
  Sampler sampler(static_cast<int64_t>(logits.size()));
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.processed_logprobs = true;
  const SampledToken want = sampler.Sample(logits.data(), greedy, {}, {}, 0, 0);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - 2.0);
  const SampledToken got = Sampler::FinishDeviceDraw({1, 2.0f, 2.0f, sum}, greedy);
  EXPECT_EQ(got.token, want.token);
  EXPECT_NEAR(got.logprob, want.logprob, 1e-7);
  EXPECT_EQ(got.processed_logprob, 0.0f);
  greedy.processed_logprobs = false;
  EXPECT_TRUE(std::isnan(Sampler::FinishDeviceDraw({1, 2.0f, 2.0f, sum}, greedy).processed_logprob));
}

TEST(Sampler, GreedyTakesTheArgmaxTiesToTheLowerId) {
  const std::vector<float> logits = {1.0f, 5.0f, 5.0f, 2.0f, kNegInf};
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0;
  p.processed_logprobs = true;
  p.top_k = 1;  // truncation never changes the argmax
  for (uint64_t t = 0; t < 8; ++t) {
    const SampledToken s = sampler.Sample(logits.data(), p, {}, {}, t, t);
    EXPECT_EQ(s.token, 1);
    EXPECT_NEAR(s.logprob, RefLogSoftmax(logits, 1.0)[1], 1e-6);  // T = 1 when greedy
    EXPECT_EQ(s.processed_logprob, 0.0f);                        // drawn with probability 1
  }
  p.processed_logprobs = false;
  EXPECT_TRUE(std::isnan(sampler.Sample(logits.data(), p, {}, {}, 0, 0).processed_logprob));
}

TEST(Sampler, RawLogprobMatchesDoubleReference) {
  constexpr int64_t kVocab = 1003;  // not a multiple of the 8-token blocks
  const std::vector<float> logits = RandomLogits(1, kVocab, 4.0f);
  Sampler sampler(kVocab);
  for (double temperature : {0.3, 1.0, 2.5}) {
    const std::vector<double> ref = RefLogSoftmax(logits, temperature);
    SamplingParams p;
    p.temperature = temperature;
    p.processed_logprobs = true;
    p.top_logprobs = 20;
    for (uint64_t t = 0; t < 50; ++t) {
      const SampledToken s = sampler.Sample(logits.data(), p, {}, {}, 0, t);
      EXPECT_NEAR(s.logprob, ref[s.token], 2e-6 + 2e-7 * std::abs(ref[s.token])) << "T " << temperature;
      // No penalties, no truncation: the processed logprob is the raw one, bit for bit.
      EXPECT_EQ(Bits(s.processed_logprob), Bits(s.logprob));
      for (const TokenLogprob& alt : s.top) EXPECT_NEAR(alt.logprob, ref[alt.token], 2e-6 + 2e-7 * std::abs(ref[alt.token]));
    }
  }
}

TEST(Sampler, MaskedLogitsAreNeverDrawn) {
  std::vector<float> logits = {0.0f, kNegInf, 0.5f, kNegInf, kNegInf, 0.25f, kNegInf, -0.5f, 1.0f, kNegInf};
  Sampler sampler(10);
  SamplingParams p;
  p.temperature = 1.3;
  const std::vector<int> counts = Histogram(sampler, logits, p, 4000);
  ExpectMatchesDistribution(counts, RefDistribution(logits, p), 4000);
}

// ---- penalties -------------------------------------------------------------

// The penalties of `p` applied to `logits` the naive way (HF/vLLM repetition
// over prompt + output, then OpenAI frequency and presence over output).
std::vector<float> RefPenalised(const std::vector<float>& logits, const SamplingParams& p,
                                const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  const int n = static_cast<int>(logits.size());
  std::vector<bool> seen(n, false);
  std::vector<int> count(n, 0);
  for (int32_t t : prompt) {
    if (t >= 0 && t < n) seen[t] = true;
  }
  for (int32_t t : output) {
    if (t >= 0 && t < n) {
      seen[t] = true;
      ++count[t];
    }
  }
  std::vector<float> out = logits;
  for (int i = 0; i < n; ++i) {
    if (!seen[i]) continue;
    double v = logits[i];
    v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= p.frequency_penalty * count[i];
    if (count[i] > 0) v -= p.presence_penalty;
    out[i] = static_cast<float>(v);
  }
  return out;
}

TEST(Sampler, PenaltiesChangeProcessedButNotRawLogprobs) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 1, -7, 99};  // out-of-vocabulary ids are ignored
  const std::vector<int32_t> output = {3, 3, 2, 4, 4};
  SamplingParams lowering;  // the top token falls below others
  lowering.temperature = 0.9;
  lowering.repetition_penalty = 1.5;
  lowering.presence_penalty = 0.4;
  lowering.frequency_penalty = 0.3;
  SamplingParams raising;  // token 4 climbs above the raw top
  raising.temperature = 1.2;
  raising.repetition_penalty = 0.5;
  raising.presence_penalty = -2;
  raising.frequency_penalty = -1.5;
  for (SamplingParams p : {lowering, raising}) {
    p.processed_logprobs = true;
    const std::vector<float> penalised = RefPenalised(logits, p, prompt, output);
    const std::vector<double> processed_ref = RefLogSoftmax(penalised, p.temperature);
    SCOPED_TRACE(testing::Message() << "repetition " << p.repetition_penalty);

    SamplingParams plain;
    plain.temperature = p.temperature;
    plain.top_logprobs = 6;
    Sampler sampler(6);
    const SampledToken unpenalised = sampler.Sample(logits.data(), plain, prompt, output, 0, 0);
    std::vector<uint32_t> raw_bits(6);
    for (const TokenLogprob& alt : unpenalised.top) raw_bits[alt.token] = Bits(alt.logprob);

    std::vector<int> counts(6, 0);
    constexpr int kDraws = 4000;
    for (int t = 0; t < kDraws; ++t) {
      const SampledToken s = sampler.Sample(logits.data(), p, prompt, output, 0, static_cast<uint64_t>(t));
      ++counts[s.token];
      EXPECT_EQ(Bits(s.logprob), raw_bits[s.token]) << "raw logprob must ignore penalties";
      EXPECT_NEAR(s.processed_logprob, processed_ref[s.token], 2e-6);
    }
    std::vector<double> dist;
    for (double lp : processed_ref) dist.push_back(std::exp(lp));
    ExpectMatchesDistribution(counts, dist, kDraws);
  }
}

TEST(Sampler, PenaltiesApplyToGreedy) {
  const std::vector<float> logits = {3.0f, 2.9f, -1.0f};
  Sampler sampler(3);
  SamplingParams p;
  p.temperature = 0;
  const std::vector<int32_t> output = {0};
  EXPECT_EQ(sampler.Sample(logits.data(), p, {}, output, 0, 0).token, 0);
  p.presence_penalty = 0.5;
  const SampledToken s = sampler.Sample(logits.data(), p, {}, output, 0, 0);
  EXPECT_EQ(s.token, 1);
  EXPECT_NEAR(s.logprob, RefLogSoftmax(logits, 1.0)[1], 1e-6);
  // Repetition: a negative logit is multiplied, a positive one divided.
  const std::vector<float> negative = {-1.0f, -1.5f, -5.0f};
  p.presence_penalty = 0;
  p.repetition_penalty = 2.0;
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(sampler.Sample(negative.data(), p, prompt, {}, 0, 0).token, 1);  // -2 < -1.5
  // Presence and frequency ignore the prompt.
  p.repetition_penalty = 1;
  p.presence_penalty = 2;
  p.frequency_penalty = 2;
  EXPECT_EQ(sampler.Sample(logits.data(), p, prompt, {}, 0, 0).token, 0);
  // The row itself is never modified.
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 2.9f, -1.0f}));
}

// ---- truncation masks ------------------------------------------------------

struct MaskCase {
  int32_t top_k;
  double top_p;
  double min_p;
  std::vector<int32_t> kept;  // ascending ids
};

TEST(Sampler, TopKTopPMinPMasksAreExact) {
  // Ids by descending probability: 5 (.30), 2 (.22), 7 (.16), 0 (.12), 3 (.08), 6, 1, 4.
  const std::vector<float> logits = EightTokenLogits();
  const std::vector<MaskCase> cases = {
      {3, 1.0, 0.0, {2, 5, 7}},
      {0, 0.6, 0.0, {2, 5, 7}},     // .30 .52 .68 >= .6
      {0, 0.5, 0.0, {2, 5}},        // .30 .52 >= .5
      {0, 0.1, 0.0, {5}},           // always at least one token
      {0, 1.0, 0.45, {2, 5, 7}},    // p >= .135
      {4, 0.75, 0.0, {2, 5, 7}},    // top-k first: over .80, .375 .65 .85 >= .75 (top-p alone keeps 4)
      {4, 0.75, 0.6, {2, 5}},       // then min-p: p >= .18
      {8, 1.0, 0.0, {0, 1, 2, 3, 4, 5, 6, 7}},
      {0, 1.0, 1.0, {5}},
  };
  Sampler sampler(8);
  for (const MaskCase& c : cases) {
    SamplingParams p;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.processed_logprobs = true;
    SCOPED_TRACE(testing::Message() << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p);
    EXPECT_EQ(sampler.TEST_KeptTokens(logits.data(), p, {}, {}), c.kept);
    const std::vector<double> dist = RefDistribution(logits, p);
    EXPECT_EQ(Support(dist), c.kept);
    constexpr int kDraws = 3000;
    const std::vector<int> counts = Histogram(sampler, logits, p, kDraws);
    std::vector<int32_t> drawn;
    for (int32_t i = 0; i < 8; ++i) {
      if (counts[i] > 0) drawn.push_back(i);
    }
    EXPECT_EQ(drawn, c.kept);
    ExpectMatchesDistribution(counts, dist, kDraws);
    // The processed logprob is log(p / kept mass).
    const SampledToken s = sampler.Sample(logits.data(), p, {}, {}, 0, 0);
    EXPECT_NEAR(s.processed_logprob, std::log(dist[s.token]), 1e-6);
  }
}

TEST(Sampler, TruncationTiesGoToTheLowerId) {
  Sampler sampler(5);
  SamplingParams p;
  const std::vector<float> ties = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  p.top_k = 2;
  EXPECT_EQ(sampler.TEST_KeptTokens(ties.data(), p, {}, {}), (std::vector<int32_t>{1, 2}));
  const std::vector<float> flat = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  p.top_k = 0;
  p.top_p = 0.4;  // cumulative 1, 2 of total 5: 2 >= 0.4 x 5 exactly
  EXPECT_EQ(sampler.TEST_KeptTokens(flat.data(), p, {}, {}), (std::vector<int32_t>{0, 1}));
  p.top_k = 3;
  p.top_p = 1.0 / 3.0 + 1e-9;
  EXPECT_EQ(sampler.TEST_KeptTokens(flat.data(), p, {}, {}), (std::vector<int32_t>{0, 1}));
  const std::vector<int> counts = Histogram(sampler, flat, p, 2000);
  EXPECT_EQ(counts[2] + counts[3] + counts[4], 0);
  EXPECT_GT(counts[0], 800);
  EXPECT_GT(counts[1], 800);
}

TEST(Sampler, ExtremeTemperaturesKeepExactSets) {
  constexpr int64_t kVocab = 1000;
  std::vector<float> logits = RandomLogits(5, kVocab, 3.0f);
  logits[123] = logits[ArgMaxRef(logits)];  // a tie at the top, after the first maximum or before it
  Sampler sampler(kVocab);
  SamplingParams p;
  p.top_p = 0.9;
  for (double temperature : {1e-30, 1e-6, 1e6, 1e30}) {
    p.temperature = temperature;
    SCOPED_TRACE(testing::Message() << "T " << temperature);
    const std::vector<int32_t> expected = Support(RefDistribution(logits, p));
    EXPECT_EQ(sampler.TEST_KeptTokens(logits.data(), p, {}, {}), expected);
    const SampledToken s = sampler.Sample(logits.data(), p, {}, {}, 0, 0);
    EXPECT_TRUE(std::binary_search(expected.begin(), expected.end(), s.token));
    EXPECT_TRUE(std::isfinite(s.logprob));
  }
}

// The large-vocabulary paths (the top-p pre-filter and growing nucleus
// chunks, the heap and nth_element top-k) against a full sort.
TEST(Sampler, LargeVocabularyMasksMatchAFullSort) {
  constexpr int64_t kVocab = 49152;
  std::vector<float> flat = RandomLogits(7, kVocab, 1.0f);
  std::vector<float> peaked = RandomLogits(8, kVocab, 2.5f);
  for (int i = 0; i < 40; ++i) peaked[static_cast<size_t>(i * 997)] += 12.0f - 0.25f * static_cast<float>(i);
  Sampler sampler(kVocab);
  struct Case {
    double temperature;
    int32_t top_k;
    double top_p;
    double min_p;
  };
  const Case cases[] = {{1.0, 0, 0.9, 0.0},   {0.7, 0, 0.5, 0.0},  {1.0, 50, 1.0, 0.0},
                        {1.0, 1000, 0.9, 0.0}, {1.2, 600, 1.0, 0.0}, {0.8, 0, 0.95, 0.01},
                        {1.0, 40000, 0.99, 0.0}};
  // A history that penalises the top tokens (and many others).
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  for (int i = 0; i < 40; i += 2) output.push_back(i * 997);
  for (int i = 0; i < 2000; ++i) prompt.push_back((i * 7919) % static_cast<int32_t>(kVocab));
  for (const std::vector<float>* logits : {&flat, &peaked}) {
    for (const bool penalties : {false, true}) {
      SamplingParams penalty_params;
      penalty_params.repetition_penalty = 1.3;
      penalty_params.presence_penalty = 0.5;
      penalty_params.frequency_penalty = 0.2;
      const std::vector<float> penalised = penalties ? RefPenalised(*logits, penalty_params, prompt, output) : *logits;
      const std::vector<int> order = RankOrder(penalised);
      for (const Case& c : cases) {
        SamplingParams p;
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        if (penalties) {
          p.repetition_penalty = penalty_params.repetition_penalty;
          p.presence_penalty = penalty_params.presence_penalty;
          p.frequency_penalty = penalty_params.frequency_penalty;
        }
        SCOPED_TRACE(testing::Message() << (logits == &flat ? "flat" : "peaked") << " penalties " << penalties
                                        << " T " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p
                                        << " min_p " << c.min_p);
        const std::vector<int32_t> expected = Support(RefDistribution(penalised, p, &order));
        const std::vector<int32_t> kept = sampler.TEST_KeptTokens(logits->data(), p, prompt, output);
        EXPECT_EQ(kept.size(), expected.size());
        EXPECT_TRUE(kept == expected);
        const SampledToken s = sampler.Sample(logits->data(), p, prompt, output, 0, 0);
        EXPECT_TRUE(std::binary_search(expected.begin(), expected.end(), s.token));
      }
    }
  }
}

// ---- frequencies -----------------------------------------------------------

TEST(Sampler, FrequenciesMatchTheTargetDistribution) {
  const std::vector<float> logits = EightTokenLogits();
  Sampler sampler(8);
  constexpr int kDraws = 20000;
  for (double temperature : {0.8, 1.0, 1.7}) {
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 1234;
    SCOPED_TRACE(testing::Message() << "T " << temperature);
    ExpectMatchesDistribution(Histogram(sampler, logits, p, kDraws), RefDistribution(logits, p), kDraws);
  }
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 6;
  p.top_p = 0.9;
  p.min_p = 0.1;
  p.seed = 99;
  ExpectMatchesDistribution(Histogram(sampler, logits, p, kDraws), RefDistribution(logits, p), kDraws);
}

// ---- determinism -----------------------------------------------------------

TEST(Sampler, SameInputsGiveTheSameTokenAndLogprobBits) {
  constexpr int64_t kVocab = 5000;
  const std::vector<float> logits = RandomLogits(3, kVocab, 3.0f);
  const std::vector<int32_t> prompt = {1, 2, 3, 4000};
  const std::vector<int32_t> output = {17, 17, 4000};
  SamplingParams p;
  p.temperature = 0.8;
  p.top_p = 0.95;
  p.repetition_penalty = 1.1;
  p.frequency_penalty = 0.2;
  p.processed_logprobs = true;
  p.top_logprobs = 5;
  p.seed = 77;
  Sampler a(kVocab);
  Sampler b(kVocab);
  for (uint64_t t = 0; t < 20; ++t) {
    const SampledToken x = a.Sample(logits.data(), p, prompt, output, 3, t);
    // Unrelated calls in between leave nothing behind.
    SamplingParams other;
    other.top_k = 7;
    (void)a.Sample(logits.data(), other, {}, prompt, 0, t);
    const SampledToken y = a.Sample(logits.data(), p, prompt, output, 3, t);
    const SampledToken z = b.Sample(logits.data(), p, prompt, output, 3, t);
    for (const SampledToken* other_result : {&y, &z}) {
      EXPECT_EQ(x.token, other_result->token);
      EXPECT_EQ(Bits(x.logprob), Bits(other_result->logprob));
      EXPECT_EQ(Bits(x.processed_logprob), Bits(other_result->processed_logprob));
      ASSERT_EQ(x.top.size(), other_result->top.size());
      for (size_t i = 0; i < x.top.size(); ++i) {
        EXPECT_EQ(x.top[i].token, other_result->top[i].token);
        EXPECT_EQ(Bits(x.top[i].logprob), Bits(other_result->top[i].logprob));
      }
    }
  }
}

TEST(Sampler, ChoicesSeedsAndPositionsAreDistinctStreams) {
  constexpr int64_t kVocab = 1000;
  const std::vector<float> logits = RandomLogits(4, kVocab, 0.5f);  // nearly flat: collisions are rare
  Sampler sampler(kVocab);
  SamplingParams p;
  p.seed = 5;
  const auto sequence = [&](uint64_t seed, uint64_t choice) {
    SamplingParams q = p;
    q.seed = seed;
    std::vector<int32_t> tokens;
    for (uint64_t t = 0; t < 32; ++t) tokens.push_back(sampler.Sample(logits.data(), q, {}, {}, choice, t).token);
    return tokens;
  };
  const std::vector<int32_t> base = sequence(5, 0);
  EXPECT_EQ(base, sequence(5, 0));
  EXPECT_NE(base, sequence(5, 1));
  EXPECT_NE(base, sequence(6, 0));
  EXPECT_NE(sequence(5, 1), sequence(5, 2));
  EXPECT_GT(std::set<int32_t>(base.begin(), base.end()).size(), 16u);  // positions differ too
}

TEST(Sampler, ScoreGivesSampleLogprobBitsForTheSameToken) {
  constexpr int64_t kVocab = 3001;
  const std::vector<float> logits = RandomLogits(6, kVocab, 3.0f);
  Sampler sampler(kVocab);
  std::vector<float> all(kVocab);
  for (double temperature : {0.0, 0.6, 1.0}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = 0.8;  // truncation and penalties never change the raw logprob
    p.repetition_penalty = 1.2;
    p.top_logprobs = 5;
    const std::vector<int32_t> output = {1, 2, 3};
    for (uint64_t t = 0; t < 5; ++t) {
      const SampledToken s = sampler.Sample(logits.data(), p, {}, output, 0, t);
      const SampledToken scored = sampler.Score(logits.data(), temperature, s.token, 5, all.data());
      EXPECT_EQ(scored.token, s.token);
      EXPECT_EQ(Bits(scored.logprob), Bits(s.logprob));
      EXPECT_EQ(Bits(all[s.token]), Bits(s.logprob));
      ASSERT_EQ(scored.top.size(), s.top.size());
      for (size_t i = 0; i < s.top.size(); ++i) {
        EXPECT_EQ(scored.top[i].token, s.top[i].token);
        EXPECT_EQ(Bits(scored.top[i].logprob), Bits(s.top[i].logprob));
      }
    }
  }
}

// ---- top_logprobs ----------------------------------------------------------

TEST(Sampler, TopLogprobsDescendTiesToTheLowerId) {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, 1.0f, 3.0f, kNegInf};
  const std::vector<double> ref = RefLogSoftmax(logits, 1.0);
  Sampler sampler(6);
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 4;
  const SampledToken s = sampler.Sample(logits.data(), p, {}, {}, 0, 0);
  EXPECT_EQ(s.token, 4);
  ASSERT_EQ(s.top.size(), 4u);
  const int32_t order[] = {4, 1, 2, 3};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s.top[i].token, order[i]);
    EXPECT_NEAR(s.top[i].logprob, ref[order[i]], 1e-6);
  }
  EXPECT_EQ(Bits(s.top[0].logprob), Bits(s.logprob));
  // More alternatives than tokens: all of them, -inf last. None when 0.
  p.top_logprobs = 20;
  const SampledToken all = sampler.Sample(logits.data(), p, {}, {}, 0, 0);
  ASSERT_EQ(all.top.size(), 6u);
  EXPECT_EQ(all.top[4].token, 0);
  EXPECT_EQ(all.top[5].token, 5);
  EXPECT_EQ(all.top[5].logprob, kNegInf);
  // With a temperature, the alternatives are log_softmax(logits / T).
  p.temperature = 2.0;
  p.top_logprobs = 2;
  const SampledToken warm = sampler.Sample(logits.data(), p, {}, {}, 0, 0);
  EXPECT_NEAR(warm.top[0].logprob, RefLogSoftmax(logits, 2.0)[4], 1e-6);
  p.top_logprobs = 0;
  EXPECT_TRUE(sampler.Sample(logits.data(), p, {}, {}, 0, 0).top.empty());
}

}  // namespace
}  // namespace flashroll::engine
