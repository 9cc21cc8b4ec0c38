// The sandbox init binary (init/sandbox_init.c), embedded in the library.
//
// The build compiles the init as a static executable and links its bytes
// into flashroll_sandbox. At run time they are written once into a sealed
// memfd, which every sandbox executes with execveat() after it is
// contained: the init needs no file in the image and no dynamic loader.
//
// Thread safety: InitBinaryFd may be called from any thread.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "sandbox/child_status.h"
#include "sandbox/rlimits.h"

namespace flashroll::sandbox {

// The memfd holding the init (close-on-exec, sealed). Created on first use
// and kept for the life of the process. Returns kIoError when the memfd
// cannot be created or sealed.
Result<int> InitBinaryFd();

// What a kept sandbox's init gets besides its control socket
// (init_protocol.h). listen_fd -1: not kept.
struct InitKeep {
  int listen_fd = -1;
  int range_lock_fd = -1;
  int64_t orphan_ms = 0;
  int64_t expires_ms = 0;  // CLOCK_REALTIME; 0: no TTL
};

// Child side, last step: makes `control_fd` fd 3 (and a kept sandbox's
// listening socket and range lock fds 4 and 5), points 0-2 at /dev/null,
// closes every other descriptor on exec, sets the plan's RLIMIT_NOFILE once
// no descriptor is to be opened any more (OpenFilesLimitChild) and executes
// the init. Returns only on failure.
ChildStatus ExecInitChild(int init_fd, int control_fd, const InitKeep& keep, const RlimitPlan& rlimits);

}  // namespace flashroll::sandbox
