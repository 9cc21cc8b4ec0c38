// Host uid/gid ranges for sandboxes' user namespaces (userns.h), one a
// sandbox, like podman's and Docker's userns-remap.
//
// The ranges are `slots` consecutive blocks of `width` ids from `base`:
// slot s is [base + s * width, base + (s + 1) * width), used for uids and
// gids alike. A live sandbox holds its slot through a UidRangeLease; two
// live sandboxes never share one, also across manager processes: the slot
// starting at host id F is held by an exclusive flock on <lock_dir>/<F>,
// which a manager keeps until
// its sandbox is fully gone (killed, reaped, its cgroups removed) and the
// kernel drops when the manager dies (its sandboxes' inits exit with it,
// reclaim.h). The lock file names the sandbox that holds it. Slots are handed
// out round-robin, so a slot just freed is the last to be taken again.
//
// The default range, [2^30, 2^31), lies above the /etc/subuid ranges that
// useradd hands out (100000 to 600100000 by default) and below 2^31, which
// some tools read as a negative id. Managers of one host should share the
// base and width (or use disjoint ranges): locks name a slot by its first
// id, which keeps equal slots apart, not partly overlapping ones.
// Open refuses a range that overlaps an
// entry of /etc/subuid or /etc/subgid, or reaches below 65536 (the host's
// own users and groups) or past the largest valid id.
//
// Thread safety: UidRanges is thread-safe. A UidRangeLease is not
// synchronised; it may be moved to and destroyed on any thread, and may
// outlive its UidRanges.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/unique_fd.h"
#include "sandbox/userns.h"

namespace flashroll::sandbox {

struct UidRangeOptions {
  uint32_t base = uint32_t{1} << 30;
  uint32_t width = 65536;
  uint32_t slots = 16384;
  std::string lock_dir = "/run/flashroll/userns";
  // Files of "name:start:count" lines whose ranges must not be used.
  std::vector<std::string> reserved_files = {"/etc/subuid", "/etc/subgid"};
};

struct UidRangeState;

// One slot held; released (for this and every other manager) when
// destroyed. Move-only; a default-constructed one holds nothing.
class UidRangeLease {
 public:
  UidRangeLease() = default;
  UidRangeLease(UidRangeLease&& other) noexcept;
  UidRangeLease& operator=(UidRangeLease&& other) noexcept;
  UidRangeLease(const UidRangeLease&) = delete;
  UidRangeLease& operator=(const UidRangeLease&) = delete;
  ~UidRangeLease();

  bool held() const { return state_ != nullptr; }
  uint32_t slot() const { return slot_; }
  IdRange range() const { return range_; }
  // The open lock file whose flock holds the slot (-1 when none): a kept
  // sandbox's init holds a copy, so the slot stays held as long as it runs.
  int lock_fd() const { return lock_.get(); }

  // For a sandbox whose teardown failed (processes may be left in the
  // range): the slot stays held until this process exits.
  void KeepForever();

 private:
  friend class UidRanges;
  void Release();

  std::shared_ptr<UidRangeState> state_;
  uint32_t slot_ = 0;
  IdRange range_;
  UniqueFd lock_;
};

class UidRanges {
 public:
  // Checks the options (kInvalidArgument naming the field, or
  // kFailedPrecondition naming the reserved file and line the range
  // overlaps) and creates lock_dir (mode 0700).
  static Result<std::unique_ptr<UidRanges>> Open(const UidRangeOptions& options);

  // Takes a free slot for the sandbox `owner` (written into the lock file).
  // Returns kResourceExhausted when every slot is held, or the failed call
  // on the lock file.
  Result<UidRangeLease> Acquire(const std::string& owner);

  const UidRangeOptions& options() const { return options_; }

 private:
  UidRanges(UidRangeOptions options, std::shared_ptr<UidRangeState> state);

  const UidRangeOptions options_;
  std::shared_ptr<UidRangeState> state_;
};

}  // namespace flashroll::sandbox
