// Small file helpers shared by the cgroup backends (internal to sandbox/).
//
// Thread safety: stateless functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox::cgroupfs {

// Writes `value` to `dir/file` in one write(2). Errors name the file and value.
Status Write(const std::string& dir, const char* file, const std::string& value);
// Writes through an already open file descriptor; `what` names it in errors.
Status WriteFd(int fd, const std::string& value, const std::string& what);
// Reads a whole small file.
Result<std::string> Read(const std::string& dir, const char* file);
// The number after `key ` on its own line of a "key value" file such as
// cgroup.events or memory.oom_control.
Result<uint64_t> ReadKey(const std::string& dir, const char* file, const char* key);
// mkdir; kAlreadyExists if it exists.
Status MakeDir(const std::string& dir);
// mkdir that accepts an existing directory.
Status EnsureDir(const std::string& dir);
// rmdir, retrying EBUSY for up to 2 s; OK if it does not exist.
Status RemoveDir(const std::string& dir);
// Subdirectory names of `dir` that start with `prefix`; empty if `dir` is missing.
Result<std::vector<std::string>> ListDirs(const std::string& dir, const std::string& prefix);
// Opens a directory for CLONE_INTO_CGROUP.
Result<UniqueFd> OpenDir(const std::string& dir);

// cgroup v2 control of one directory.
Status V2Kill(const std::string& dir);
Status V2SetFrozen(const std::string& dir, bool frozen);
// Waits until `dir` has no processes, up to `timeout_ms`.
Status V2WaitEmpty(const std::string& dir, int timeout_ms);
// SIGKILLs every pid listed in dir/cgroup.procs until none is left (for v1
// directories, which have no cgroup.kill), up to 2 s.
Status KillAllListed(const std::string& dir);

}  // namespace flashroll::sandbox::cgroupfs
