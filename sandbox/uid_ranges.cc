#include "sandbox/uid_ranges.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <mutex>

namespace flashroll::sandbox {

namespace {

// Ids below this are the host's own users and groups.
constexpr uint64_t kLowestBase = 65536;
// (uid_t)-1 means "no id" to the kernel.
constexpr uint64_t kLargestId = 4294967294u;

// Checks that [first, last] overlaps no "name:start:count" line of `path`
// (a missing file reserves nothing).
Status CheckReserved(const std::string& path, uint64_t first, uint64_t last) {
  std::ifstream in(path);
  if (!in) return Status::Ok();
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t colon = line.find(':');
    const size_t second = colon == std::string::npos ? colon : line.find(':', colon + 1);
    if (line.empty() || line[0] == '#' || second == std::string::npos) continue;
    char* end = nullptr;
    const uint64_t start = std::strtoull(line.c_str() + colon + 1, &end, 10);
    if (end != line.c_str() + second) continue;
    const uint64_t count = std::strtoull(line.c_str() + second + 1, &end, 10);
    if (count == 0 || start > last || start + count - 1 < first) continue;
    return Status::FailedPrecondition("userns ids [" + std::to_string(first) + ", " + std::to_string(last) +
                                      "] overlap " + path + " line " + std::to_string(number) + " (" + line +
                                      "): choose another userns_base");
  }
  return Status::Ok();
}

}  // namespace

struct UidRangeState {
  std::mutex mu;
  std::vector<bool> held;  // slots this process holds; guarded by mu
  uint32_t next = 0;       // where the next search starts; guarded by mu

  void Forget(uint32_t slot) {
    std::lock_guard<std::mutex> lock(mu);
    held[slot] = false;
  }
};

UidRangeLease::UidRangeLease(UidRangeLease&& other) noexcept
    : state_(std::move(other.state_)), slot_(other.slot_), range_(other.range_), lock_(std::move(other.lock_)) {}

UidRangeLease& UidRangeLease::operator=(UidRangeLease&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
    slot_ = other.slot_;
    range_ = other.range_;
    lock_ = std::move(other.lock_);
  }
  return *this;
}

UidRangeLease::~UidRangeLease() { Release(); }

void UidRangeLease::Release() {
  if (state_ == nullptr) return;
  // Emptied first: a lock file that still names a sandbox was not released
  // by its manager (which died).
  (void)::ftruncate(lock_.get(), 0);
  lock_.reset();  // drops the flock
  state_->Forget(slot_);
  state_.reset();
}

void UidRangeLease::KeepForever() {
  (void)lock_.release();  // the flock stays with the open descriptor
  state_.reset();         // and the slot stays marked held here
}

UidRanges::UidRanges(UidRangeOptions options, std::shared_ptr<UidRangeState> state)
    : options_(std::move(options)), state_(std::move(state)) {}

Result<std::unique_ptr<UidRanges>> UidRanges::Open(const UidRangeOptions& options) {
  if (options.width == 0) return Status::InvalidArgument("userns_width: must be at least 1");
  if (options.slots == 0) return Status::InvalidArgument("userns_slots: must be at least 1");
  if (options.base < kLowestBase) {
    return Status::InvalidArgument("userns_base " + std::to_string(options.base) +
                                   ": below 65536, where the host's own users and groups are");
  }
  const uint64_t last = uint64_t{options.base} + uint64_t{options.width} * options.slots - 1;
  if (last > kLargestId) {
    return Status::InvalidArgument("userns_base + userns_width * userns_slots: the last id " + std::to_string(last) +
                                   " is past " + std::to_string(kLargestId));
  }
  for (const auto& path : options.reserved_files) FR_RETURN_IF_ERROR(CheckReserved(path, options.base, last));
  const size_t slash = options.lock_dir.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string parent = options.lock_dir.substr(0, slash);
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + parent);
  }
  if (::mkdir(options.lock_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "mkdir " + options.lock_dir);
  }
  auto state = std::make_shared<UidRangeState>();
  state->held.assign(options.slots, false);
  return std::unique_ptr<UidRanges>(new UidRanges(options, std::move(state)));
}

Result<UidRangeLease> UidRanges::Acquire(const std::string& owner) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (uint32_t i = 0; i < options_.slots; ++i) {
    const uint32_t slot = (state_->next + i) % options_.slots;
    if (state_->held[slot]) continue;
    const uint32_t first = options_.base + slot * options_.width;
    const std::string path = options_.lock_dir + "/" + std::to_string(first);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return Status::FromErrno(errno, "userns range: open " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) continue;  // another manager's sandbox has it
      return Status::FromErrno(errno, "userns range: flock " + path);
    }
    const std::string text = owner + "\n";
    if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), text.data(), text.size(), 0) < 0) {
      return Status::FromErrno(errno, "userns range: write " + path);
    }
    state_->held[slot] = true;
    state_->next = (slot + 1) % options_.slots;
    UidRangeLease lease;
    lease.state_ = state_;
    lease.slot_ = slot;
    lease.range_ = IdRange{first, options_.width};
    lease.lock_ = std::move(fd);
    return lease;
  }
  return Status::ResourceExhausted("userns ranges: all " + std::to_string(options_.slots) + " slots of " +
                                   std::to_string(options_.width) + " ids from " + std::to_string(options_.base) +
                                   " are held by live sandboxes");
}

}  // namespace flashroll::sandbox
