#include "rollout/failure_kind.h"

namespace flashroll {

const char* FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kSandboxStart: return "sandbox_start";
    case FailureKind::kSandboxLost: return "sandbox_lost";
    case FailureKind::kHostOom: return "host_oom";
    case FailureKind::kPolicyUnreachable: return "policy_unreachable";
    case FailureKind::kHarnessCrash: return "harness_crash";
    case FailureKind::kVerifierCrash: return "verifier_crash";
  }
  return "unknown";
}

std::optional<FailureKind> ParseFailureKind(std::string_view name) {
  for (FailureKind kind : kFailureKinds) {
    if (name == FailureKindName(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace flashroll
