// Where the network policy pins its BPF links: one bpffs directory per
// sandbox, /sys/fs/bpf/flashroll/<sandbox name>/<program>.
//
// Why pins: a cgroup BPF link lives as long as something refers to it. Held
// only by the manager's descriptors, it went with a SIGKILLed manager, and a
// sandbox still running (a frozen one, or one whose init had not yet seen its
// control socket close) was unpoliced from then on. A pinned link holds until
// its pin is removed: by the sandbox's teardown after its last process is
// gone, or by the next manager's start-up reclaim (reclaim.h), which finds the
// directories of dead managers by their names (naming.h).
//
// Thread safety: stateless functions; safe to call from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll::sandbox {

inline constexpr char kBpfPinRoot[] = "/sys/fs/bpf/flashroll";

// Makes sure a bpffs is mounted at /sys/fs/bpf (mounting one there if not,
// mode 0700) and that kBpfPinRoot exists. Returns the failed mount or mkdir.
Status EnsureBpfPinRoot();

// kBpfPinRoot/<sandbox_name>.
std::string BpfPinDir(const std::string& sandbox_name);

// Names of the sandboxes that have a pin directory now (empty when bpffs or
// kBpfPinRoot is absent).
Result<std::vector<std::string>> ListBpfPinDirs();

// Unlinks every pin in the sandbox's directory and removes the directory.
// OK when it does not exist. Returns the failed unlink or rmdir.
Status RemoveBpfPins(const std::string& sandbox_name);

}  // namespace flashroll::sandbox
