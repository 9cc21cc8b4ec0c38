// ScriptedPolicy: a Policy that replays fixed assistant messages, one per
// turn, as the tokens the tokenizer gives them, each closed with
// <|im_end|>. For driving the real episode path with a known agent: the
// verdict-hack tests (an attacker's exact steps) and the verification
// benchmark (bench/verify_bench.cc).
//
// Thread safety: one episode at a time (it counts the turns it served).
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "rollout/policy.h"

namespace flashroll {

class ScriptedPolicy : public Policy {
 public:
  // The tokenizer must outlive the policy.
  ScriptedPolicy(const engine::Tokenizer& tokenizer, std::vector<std::string> messages)
      : tokenizer_(tokenizer), messages_(std::move(messages)) {}
  int64_t max_model_len() const override { return int64_t{1} << 20; }
  // kInternal once every message was served.
  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override;

 private:
  const engine::Tokenizer& tokenizer_;
  const std::vector<std::string> messages_;
  size_t next_ = 0;
};

}  // namespace flashroll
