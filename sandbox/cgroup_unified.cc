// Unified layout: one cgroup v2 directory per sandbox holds the limits and
// is also the one that is killed and frozen.
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cmath>
#include <set>
#include <sstream>

#include "sandbox/cgroup_backends.h"
#include "sandbox/cgroup_fs.h"
#include "sandbox/naming.h"

namespace flashroll::sandbox {

namespace {

class UnifiedCgroup : public Cgroup {
 public:
  UnifiedCgroup(std::string name, std::string dir) : Cgroup(std::move(name)), dir_(std::move(dir)) {}

  ~UnifiedCgroup() override {
    if (created_ && !removed_) {
      (void)Kill();
      (void)cgroupfs::V2WaitEmpty(dir_, 2000);
      (void)Remove();
    }
  }

  // Takes over cgroups that exist (Adopt).
  Status Open() {
    if (::access(dir_.c_str(), F_OK) != 0) return Status::NotFound("cgroup " + name() + ": " + dir_ + " is gone");
    created_ = true;
    return Status::Ok();
  }

  Status Init(const CgroupLimits& limits) {
    FR_RETURN_IF_ERROR(cgroupfs::MakeDir(dir_));
    created_ = true;
    FR_ASSIGN_OR_RETURN(fd_, cgroupfs::OpenDir(dir_));
    return ApplyLimits(limits);
  }

  Status ApplyLimits(const CgroupLimits& limits) override {
    if (limits.memory_bytes != 0) {
      FR_RETURN_IF_ERROR(cgroupfs::Write(dir_, "memory.max", std::to_string(limits.memory_bytes)));
      if (::access((dir_ + "/memory.swap.max").c_str(), F_OK) == 0) {
        FR_RETURN_IF_ERROR(cgroupfs::Write(dir_, "memory.swap.max", "0"));
      }
    }
    if (limits.pids != 0) FR_RETURN_IF_ERROR(cgroupfs::Write(dir_, "pids.max", std::to_string(limits.pids)));
    if (limits.cpus > 0) {
      constexpr int64_t kPeriodUs = 100000;
      const auto quota = std::max<int64_t>(1000, std::llround(limits.cpus * kPeriodUs));
      FR_RETURN_IF_ERROR(cgroupfs::Write(dir_, "cpu.max", std::to_string(quota) + " " + std::to_string(kPeriodUs)));
    }
    if (!limits.cpuset.empty()) FR_RETURN_IF_ERROR(cgroupfs::Write(dir_, "cpuset.cpus", limits.cpuset));
    return Status::Ok();
  }

  int clone_into_fd() const override { return fd_.get(); }
  Status AttachParentSide(pid_t) override {  // CLONE_INTO_CGROUP did it all
    fd_.reset();
    return Status::Ok();
  }
  Status Kill() override { return cgroupfs::V2Kill(dir_); }
  Status SetFrozen(bool frozen) override { return cgroupfs::V2SetFrozen(dir_, frozen); }
  Result<bool> Frozen() override {
    FR_ASSIGN_OR_RETURN(uint64_t frozen, cgroupfs::ReadKey(dir_, "cgroup.events", "frozen"));
    return frozen == 1;
  }
  void Abandon() override {
    fd_.reset();
    removed_ = true;
  }
  Result<uint64_t> OomKillCount() override { return cgroupfs::ReadKey(dir_, "memory.events", "oom_kill"); }

  Result<OomNotifier> OpenOomNotifier() override {
    // kernfs notifies pollers of memory.events with EPOLLPRI on every change.
    OomNotifier notifier;
    const std::string path = dir_ + "/memory.events";
    notifier.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!notifier.fd.valid()) return Status::FromErrno(errno, "open " + path);
    notifier.events = EPOLLPRI;
    DrainOomNotifier(notifier);
    return notifier;
  }

  Status Remove() override {
    fd_.reset();
    Status status = cgroupfs::RemoveDir(dir_);
    removed_ = status.ok();
    return status;
  }

 private:
  std::string dir_;
  UniqueFd fd_;
  bool created_ = false;
  bool removed_ = false;
};

class UnifiedBackend : public CgroupBackend {
 public:
  explicit UnifiedBackend(std::string root) : root_(std::move(root)) {}

  // Enables the four controllers for flashroll/ and its children; a missing
  // controller is an error, since its limit could not be applied.
  Status Init() {
    FR_ASSIGN_OR_RETURN(std::string available, cgroupfs::Read(root_, "cgroup.controllers"));
    std::istringstream words(available);
    std::set<std::string> have;
    for (std::string word; words >> word;) have.insert(word);
    std::string enable;
    for (const char* controller : {"memory", "pids", "cpu", "cpuset"}) {
      if (have.count(controller) == 0) {
        return Status::FailedPrecondition(root_ + ": cgroup v2 controller '" + controller + "' is not available");
      }
      enable += std::string(enable.empty() ? "+" : " +") + controller;
    }
    FR_RETURN_IF_ERROR(cgroupfs::Write(root_, "cgroup.subtree_control", enable));
    FR_RETURN_IF_ERROR(cgroupfs::EnsureDir(Base()));
    return cgroupfs::Write(Base(), "cgroup.subtree_control", enable);
  }

  const char* layout() const override { return "unified"; }

  Result<std::unique_ptr<Cgroup>> Create(const std::string& name, const CgroupLimits& limits) override {
    auto cgroup = std::make_unique<UnifiedCgroup>(name, Base() + "/" + name);
    FR_RETURN_IF_ERROR(cgroup->Init(limits).Wrap("cgroup " + name));
    return std::unique_ptr<Cgroup>(std::move(cgroup));
  }

  Result<std::unique_ptr<Cgroup>> Adopt(const std::string& name) override {
    auto cgroup = std::make_unique<UnifiedCgroup>(name, Base() + "/" + name);
    FR_RETURN_IF_ERROR(cgroup->Open());
    return std::unique_ptr<Cgroup>(std::move(cgroup));
  }

  Result<std::vector<std::string>> List() override { return cgroupfs::ListDirs(Base(), kNamePrefix); }

  Status RemoveLeftover(const std::string& name) override {
    const std::string dir = Base() + "/" + name;
    if (::access(dir.c_str(), F_OK) != 0) return Status::Ok();
    FR_RETURN_IF_ERROR(cgroupfs::V2Kill(dir));
    FR_RETURN_IF_ERROR(cgroupfs::V2WaitEmpty(dir, 2000));
    return cgroupfs::RemoveDir(dir);
  }

 private:
  std::string Base() const { return root_ + "/flashroll"; }
  const std::string root_;
};

}  // namespace

Result<std::unique_ptr<CgroupBackend>> OpenUnifiedCgroupBackend(const std::string& root) {
  auto backend = std::make_unique<UnifiedBackend>(root);
  FR_RETURN_IF_ERROR(backend->Init().Wrap("cgroups (unified layout)"));
  return std::unique_ptr<CgroupBackend>(std::move(backend));
}

}  // namespace flashroll::sandbox
