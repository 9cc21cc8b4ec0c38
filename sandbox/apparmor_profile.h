// The AppArmor profile of a sandbox, generated from its spec (the sandboxes
// of one manager whose specs give the same text share it: apparmor.h).
//
// A third fence, where the kernel has AppArmor (apparmor.h loads it), behind
// the mount namespace and Landlock, in the spirit of Docker's
// docker-default profile but written for what a sandbox is:
//   - everything the sandbox sees may be read, mapped and run; programs it
//     runs stay in the profile;
//   - writes only to the writable layer's trees (the root's top-level
//     entries other than /proc, /sys and /dev), the harmless device nodes
//     (null, zero, full, random, urandom, tty, pts, shm) and the --rw paths;
//     /proc/sys, /sys, /proc/sysrq-trigger and /proc/kcore are denied
//     whatever else would allow them;
//   - no mount, umount, remount or pivot_root;
//   - ptrace and signals only among the sandbox's own processes (and the
//     manager's kill, from unconfined);
//   - unix, TCP, UDP and netlink sockets; raw IP sockets only with --net
//     policy (whose eBPF egress program polices every packet); never packet
//     sockets;
//   - no capabilities (the init drops them all anyway, caps.h).
//
// Paths come from the spec, so they are quoted and every character the
// profile language treats specially (" \ * ? [ ] { } ^ , @ #) is escaped:
// a --rw path can only ever name itself. Control characters cannot be
// written in a profile and are refused.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

// "flashroll-<sandbox name>".
std::string AppArmorProfileName(const std::string& sandbox_name);

// The profile text for the sandbox `sandbox_name` running `spec`, whose
// writable layer has the top-level trees `writable_root_entries`
// (MountPlan::writable_root_entries): the only top-level trees it may write.
// Returns kInvalidArgument naming the field (e.g. "rw path '/a\nb': ...")
// for a path the profile language cannot hold.
Result<std::string> GenerateAppArmorProfile(const std::string& sandbox_name, const SandboxSpec& spec,
                                            const std::vector<std::string>& writable_root_entries);

// `path` as a quoted profile path that matches exactly that path, or
// kInvalidArgument for a control character (`field` names it in the error).
Result<std::string> QuoteAppArmorPath(std::string_view path, std::string_view field);

}  // namespace flashroll::sandbox
