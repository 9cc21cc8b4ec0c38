// Sampler: picks the next token of a sequence from one row of logits, with
// the request's sampling parameters, exactly and reproducibly.
//
// What a call computes, in this order (vLLM's v0 order; v1 applies min-p
// before top-k/top-p):
//   1. penalties, on a copy of the logits (the row itself is never
//      modified): repetition (Hugging Face / vLLM rule, over the prompt and
//      output tokens: logit > 0 ? logit / p : logit * p), then frequency and
//      presence (OpenAI rule, over the output tokens: logit -= frequency x
//      count, then -= presence if count > 0); in double, rounded back to
//      float;
//   2. temperature: weights w_i = exp((l_i - s) x (1 / T)) in double, l the
//      penalised logits, s the largest raw logit (or the largest penalised
//      one, if a negative penalty raised it above); without penalties the
//      most likely token has weight exactly 1;
//   3. top-k: the k first tokens in rank order — descending penalised logit
//      (that is, descending probability), ties to the lower id;
//   4. top-p: of the tokens left, the smallest prefix in rank order whose
//      cumulative weight, summed one token at a time in that order, is
//      >= top_p x their total weight; always at least one token;
//   5. min-p: of those, the tokens with w_i >= min_p x w_max, w_max the
//      weight of the most likely token;
//   6. the draw: u = UniformDouble(seed, choice_index, token_index), and the
//      inverse CDF over the kept tokens in ascending id: the first token at
//      which the running sum of kept weights exceeds u x their total.
// Greedy (temperature 0) replaces 2-6 by the argmax of the penalised logits,
// ties to the lower id.
//
// Exactness: the result depends only on the bits of the logits row, the
// parameters, the token history and (choice_index, token_index) — never on
// threads, on other sequences or on what the Sampler computed before —
// because every reduction has a fixed order:
//   - exp is our own polynomial (within 1 ulp of the true exp; weights below
//     e^-707 are 0), computed without fused multiply-adds on every ISA path,
//     so a weight has the same bits whichever code path computes it;
//   - totals (the draw's, top-p's and the raw normaliser) are block sums over
//     the vocabulary: tokens not in the set count as 0; each block of 64
//     consecutive ids is summed by a fixed tree (lane j of 8 adds ids j,
//     8+j, ..., 56+j pairwise, then the 8 lanes pairwise), and the block sums
//     are added in ascending id. The draw walks the same blocks with the same
//     running sum, then the ids inside one block one at a time;
//   - top-p's cumulative is sequential in rank order, as defined above;
//   - arithmetic is in double; logprobs are rounded to float at the end.
// Cost (vocabulary V): every call makes one exp pass over V for the raw
// logprob, plus a few O(V) passes (argmax, block sums); temperature and min-p
// add nothing else and sort nothing; penalties copy the row and touch only
// the history's tokens; top-k keeps a bounded heap (nth_element
// for k > 512); top-p sorts only the tokens of the weight bands that reach
// the nucleus (radix sort for large bands). No allocation per call once the
// scratch buffers have grown, except the returned `top`.
//
// Thread safety: a Sampler is not thread-safe (scratch buffers); use one per
// thread. Distinct Samplers may run on distinct threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace flashroll::engine {

// The most raw alternatives a sampled token reports (SamplingParams::top_logprobs).
inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingParams {
  double temperature = 1.0;         // >= 0; 0 = greedy (argmax, ties to the lower id)
  int32_t top_k = 0;                // <= 0 or >= vocab size = off
  double top_p = 1.0;               // (0, 1]; 1 = off
  double min_p = 0.0;               // [0, 1]; 0 = off
  double repetition_penalty = 1.0;  // > 0; 1 = off; over prompt + output tokens
  double presence_penalty = 0.0;    // [-2, 2]; over output tokens
  double frequency_penalty = 0.0;   // [-2, 2]; over output tokens
  int32_t top_logprobs = 0;         // [0, 20] raw alternatives to report
  bool processed_logprobs = false;  // also report SampledToken::processed_logprob
  uint64_t seed = 0;
};

// OK, or InvalidArgument naming the field and the value, e.g.
// "top_p must be in (0, 1], got 1.5". NaN and infinities are rejected.
Status ValidateSamplingParams(const SamplingParams& params);

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampledToken {
  int32_t token = -1;
  // Raw: log_softmax(logits / T)[token], T the temperature (1 when greedy);
  // no penalties, no truncation: the trainer's policy logprob. Computed as
  // (l - l_max) x (1 / T) - log(block sum of the raw weights).
  float logprob = 0;
  // The log of the probability the token was drawn with (after penalties,
  // temperature, top-k, top-p and min-p; 0 when greedy). NaN unless
  // params.processed_logprobs.
  float processed_logprob = 0;
  // The params.top_logprobs highest raw logprobs, descending, ties to the
  // lower id (the sampled token may or may not be among them).
  std::vector<TokenLogprob> top;
};

// A draw made on a GPU (engine/cuda's DrawRows) for parameters
// DrawsOnDevice accepts: the plan goes to the device, the result comes back
// and FinishDeviceDraw makes of it the SampledToken Sample would return —
// the device computes the sampler's own argmax, weights, block sums and
// inverse CDF bit for bit, and the log is taken here, on the host.
struct DeviceDrawPlan {
  bool greedy = true;
  double inv_t = 1.0;  // 1 / temperature; 1 when greedy
  double u = 0.0;      // UniformDouble(seed, choice_index, token_index); 0 when greedy
};
struct DeviceDraw {
  int32_t token = 0;
  float token_logit = 0;  // logits[token]
  float max_logit = 0;    // the row's largest logit
  double weight_sum = 0;  // the block sum of exp((l - max_logit) x inv_t)
};

class Sampler {
 public:
  // Whether a device draw gives what Sample does for `params`: no penalties,
  // no top-k, top-p or min-p, no top_logprobs.
  static bool DrawsOnDevice(const SamplingParams& params);
  static DeviceDrawPlan PlanDeviceDraw(const SamplingParams& params, uint64_t choice_index, uint64_t token_index);
  // Precondition: DrawsOnDevice(params), and `draw` made by the plan above.
  static SampledToken FinishDeviceDraw(const DeviceDraw& draw, const SamplingParams& params);

  // Precondition: vocab_size > 0.
  explicit Sampler(int64_t vocab_size);

  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  int64_t vocab_size() const { return vocab_size_; }

  // Samples one token from `logits`, vocab_size() floats (read only).
  // `prompt` and `output` are the sequence's tokens so far, for the
  // penalties (ids outside the vocabulary are ignored). The random draw is
  // UniformDouble(params.seed, choice_index, token_index): the n choices of
  // one request use distinct choice indices and differ; each is
  // reproducible. Preconditions: ValidateSamplingParams(params) is OK; the
  // logits are finite or -inf, at least one finite (otherwise the call still
  // returns a token in range, but its logprobs may be NaN).
  SampledToken Sample(const float* logits, const SamplingParams& params, std::span<const int32_t> prompt,
                      std::span<const int32_t> output, uint64_t choice_index, uint64_t token_index);

  // Scores a given token: its raw logprob (bitwise what Sample reports for
  // that token with this temperature; T = 0 counts as 1) and the
  // top_logprobs highest raw alternatives. With `vocab_logprobs` (vocab_size()
  // floats), also writes the raw log-softmax of every token.
  SampledToken Score(const float* logits, double temperature, int32_t token, int32_t top_logprobs,
                     float* vocab_logprobs = nullptr);

  // Test hook: the tokens a non-greedy Sample with these arguments can draw
  // (kept by the truncation steps, with nonzero weight), in ascending id.
  // Precondition: params.temperature > 0.
  std::vector<int32_t> TEST_KeptTokens(const float* logits, const SamplingParams& params,
                                       std::span<const int32_t> prompt, std::span<const int32_t> output);

 private:
  struct Truncation {
    float top;          // the largest penalised logit
    float shift;        // weights are exp((l - shift) / T): max(top, largest raw logit)
    double min_weight;  // min-p's bound: min_p x the top token's weight
  };
  // Fills weights_ with the raw weights exp((l - l_max) / T) (T = 1 / inv_t)
  // and returns the log of their block sum; *argmax: the raw argmax.
  double RawPass(const float* logits, double inv_t, int64_t* argmax);
  // After RawPass (same T) and ApplyPenalties (proc): leaves in weights_ the
  // weights of the tokens that top-k and top-p keep and 0 for the others.
  Truncation Truncate(const float* logits, const float* proc, int64_t raw_argmax, const SamplingParams& params);
  // Truncate's top-k and top-p: `weights_ready` says whether weights_ already
  // holds the weights of proc shifted by `shift`; proc_max is proc's top.
  void KeepTruncated(const float* proc, float proc_max, float shift, bool weights_ready,
                     const SamplingParams& params);
  // The penalised copy of `logits` in penalised_, or `logits` itself when no
  // penalty changes anything.
  const float* ApplyPenalties(const float* logits, const SamplingParams& params, std::span<const int32_t> prompt,
                              std::span<const int32_t> output);
  // Writes to out the rank keys (see the .cc) of the first k tokens of x in
  // rank order, unsorted, and returns k. Precondition: 0 < k <= vocab_size_;
  // out has room for k keys, or for vocab_size_ when k > kHeapMaxK.
  int64_t SelectTopK(const float* x, int64_t k, uint64_t* out);
  // Sorts candidates_[begin, end) into rank order.
  void SortCandidates(size_t begin, size_t end);
  // Replaces weights_ by zeros except for the tokens of candidates_[0, n).
  void KeepOnly(size_t n);
  // Sorts candidates_[begin, end), which rank right after the tokens whose
  // weights make up *cum, and adds their weights to *cum in rank order. On
  // reaching `target`, keeps the tokens up to there (KeepOnly) and returns
  // true.
  bool NucleusIn(size_t begin, size_t end, double target, double* cum);

  const int64_t vocab_size_;
  // Scratch, sized on first use and reused.
  std::vector<double> weights_;          // [vocab_size] exp weights of a row
  std::vector<float> penalised_;         // [vocab_size] logits after penalties
  std::vector<int32_t> output_counts_;   // [vocab_size] zero between calls
  std::vector<uint8_t> seen_;            // [vocab_size] zero between calls
  std::vector<int32_t> touched_;         // ids whose output_counts_/seen_ are set
  std::vector<uint64_t> candidates_;     // [vocab_size + 1] top-k / top-p tokens as rank keys
  std::vector<uint64_t> radix_scratch_;  // the radix sort's second buffer
  std::vector<double> kept_weights_;     // KeepOnly's saved weights
  std::vector<uint64_t> top_heap_;       // [20] top_logprobs working set
};

}  // namespace flashroll::engine
