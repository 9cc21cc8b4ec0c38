// SeccompProfile: a syscall filter profile read from a JSON file in a
// subset of Docker's seccomp profile format, as a typed struct.
//
//   {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
//    "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ALLOW"},
//                 {"names": ["socket"], "action": "SCMP_ACT_ALLOW",
//                  "args": [{"index": 0, "value": 1, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]}]}
//
// Actions: SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_ACT_KILL, SCMP_ACT_KILL_THREAD,
// SCMP_ACT_KILL_PROCESS, SCMP_ACT_TRAP, SCMP_ACT_LOG. Operators: SCMP_CMP_EQ,
// _NE, _LT, _LE, _GT, _GE and _MASKED_EQ (as in Docker, "value" is the mask and
// "valueTwo" the datum). Unknown fields and unknown system calls are errors,
// so a typo never silently weakens a profile.
//
// Default deny: without "defaultAction" a profile fails every system call it
// does not list with ENOSYS (or "defaultErrnoRet"); "SCMP_ACT_ERRNO" alone
// means EPERM, as in Docker. A default that lets calls through
// (SCMP_ACT_ALLOW, SCMP_ACT_LOG) also lets through every call a later
// kernel adds, and is refused unless the profile says "allowUnlisted": true.
// A default-deny profile must allow what the sandbox's own init needs once
// the filter is on (sandbox/init_binary.cc, sandbox/init/sandbox_init.c).
//
// Thread safety: the functions are reentrant; a SeccompProfile is a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace flashroll::sandbox {

struct SeccompArg {
  unsigned index = 0;   // 0..5
  int op = 0;           // enum scmp_compare
  uint64_t value = 0;
  uint64_t value_two = 0;
};

struct SeccompRule {
  std::vector<int> syscalls;  // resolved numbers for the native architecture
  uint32_t action = 0;        // libseccomp action, errno included
  std::vector<SeccompArg> args;
};

struct SeccompProfile {
  uint32_t default_action = 0;  // libseccomp action, errno included
  std::vector<SeccompRule> rules;
};

// Turns the parsed profile `root` into a SeccompProfile. Returns
// kInvalidArgument "<field>: <problem>", e.g.
// "syscalls[3].names[1]: unknown system call 'frobnicate'" or
// "defaultAction: SCMP_ACT_ALLOW lets through every system call not listed,
// ..." without "allowUnlisted".
Result<SeccompProfile> ParseSeccompProfile(const Json& root);

// Reads and parses the profile file at `path`. Errors name the file first:
// "<path>: syscalls[0].action: unknown action 'SCMP_ACT_NOPE'"; a missing or
// unreadable file gives the read error.
Result<SeccompProfile> ReadSeccompProfile(const std::string& path);

}  // namespace flashroll::sandbox
