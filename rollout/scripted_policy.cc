#include "rollout/scripted_policy.h"

namespace flashroll {

Result<bool> ScriptedPolicy::Generate(const PolicyRequest&, const std::function<void(const PolicyToken&)>& on_token,
                                      const std::function<bool()>&) {
  if (next_ >= messages_.size()) return Status::Internal("scripted policy: no message for turn " + std::to_string(next_));
  for (int32_t id : tokenizer_.Encode(messages_[next_++], /*parse_special=*/false)) on_token({id, 0.0f, 0});
  on_token({tokenizer_.TokenId("<|im_end|>"), 0.0f, 0});
  return false;
}

}  // namespace flashroll
