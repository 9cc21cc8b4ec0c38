// FailureKind: the infrastructure failures of a sample, defined once here
// for the store (samples.failure_kind), the export, the run summary and
// evaluation (docs/STORE.md samples.failure_kind, docs/DESIGN.md).
//
// A failure is infrastructure only when no token the policy sampled could
// have caused it:
//   sandbox_start       the sandbox could not be created or started
//   sandbox_lost        its init or the manager died while no agent command
//                       ran (the next command found the sandbox gone)
//   host_oom            memory ran out outside the sandbox's cgroup (the
//                       job itself could not allocate)
//   policy_unreachable  the policy (engine or endpoint) gave no turn
//   harness_crash       the harness failed before the agent's first token
//                       (the task's files could not be written)
//   verifier_crash      the verifier broke before running any artifact of
//                       the agent's (its files could not be written, the
//                       workspace could not be copied for the check)
// Everything the agent's commands or artifacts trigger is its outcome and
// is rewarded, never one of these: OOM or the pids limit inside its cgroup,
// a tool timeout, a verifier timeout while running its code, ENOSPC, a
// sandbox that died while its command ran.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace flashroll {

enum class FailureKind {
  kSandboxStart,
  kSandboxLost,
  kHostOom,
  kPolicyUnreachable,
  kHarnessCrash,
  kVerifierCrash,
};

inline constexpr std::array<FailureKind, 6> kFailureKinds = {
    FailureKind::kSandboxStart,      FailureKind::kSandboxLost,  FailureKind::kHostOom,
    FailureKind::kPolicyUnreachable, FailureKind::kHarnessCrash, FailureKind::kVerifierCrash};

// "sandbox_start", "sandbox_lost", "host_oom", "policy_unreachable",
// "harness_crash", "verifier_crash".
const char* FailureKindName(FailureKind kind);

// The kind named `name`, or nullopt for any other string.
std::optional<FailureKind> ParseFailureKind(std::string_view name);

}  // namespace flashroll
