#include "rollout/reasoning_length.h"

#include <string>
#include <vector>

namespace flashroll {

int64_t ReasoningTokens(const engine::Tokenizer& tokenizer, const Scaffold& scaffold,
                        std::span<const int32_t> sampled) {
  // Parsed over the raw bytes, not Decode's text: Decode replaces invalid
  // UTF-8, which would shift the offsets off the token boundaries.
  std::string bytes;
  std::vector<size_t> ends;
  ends.reserve(sampled.size());
  for (int32_t id : sampled) {
    bytes += tokenizer.TokenBytes(id);
    ends.push_back(bytes.size());
  }
  size_t action_begin = 0, action_end = 0;
  if (auto turn = scaffold.Parse(bytes); turn.ok()) {
    action_begin = turn->action_begin;
    action_end = turn->action_end;
  }
  int64_t count = 0;
  size_t start = 0;
  for (size_t end : ends) {
    const bool inside_action = start >= action_begin && end <= action_end && start < end;
    if (!inside_action) ++count;
    start = end;
  }
  return count;
}

}  // namespace flashroll
