// Names of sandboxes: unique, recognisable, and traceable to their manager.
//
// A name is "fr-<manager pid>-<manager start time>-<sequence>". Everything a
// sandbox creates on the host (cgroup directories, the ifalias of its veth)
// carries it, so reclaim can find leftovers by the prefix and tell a live
// manager's sandboxes (pid alive with the same start time) from a killed
// one's.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <string>

namespace flashroll::sandbox {

inline constexpr char kNamePrefix[] = "fr-";

// A name no other sandbox on this host has had since boot.
std::string NewSandboxName();

// The name prefix of this process's sandboxes: "fr-<pid>-<start>-" (a
// forked child gets its own).
const std::string& OwnNamePrefix();

// Field 22 of /proc/<pid>/stat (the start time in clock ticks since boot),
// or 0 when there is no such process: with the pid, a process's identity.
unsigned long long ProcessStartTime(long pid);

// True when the manager that created `name` is still running. A name that
// does not parse is treated as a leftover (false).
bool OwnerAlive(const std::string& name);

}  // namespace flashroll::sandbox
