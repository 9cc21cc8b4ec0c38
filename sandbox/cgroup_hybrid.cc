// Hybrid layout: limits in the v1 memory, pids, cpu and cpuset hierarchies,
// kill and freeze in a v2 directory (the v2 tree has no controllers here).
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <set>
#include <utility>

#include "sandbox/cgroup_backends.h"
#include "sandbox/cgroup_fs.h"
#include "sandbox/naming.h"

namespace flashroll::sandbox {

namespace {

constexpr std::array<const char*, 4> kControllers = {"memory", "pids", "cpu", "cpuset"};
constexpr size_t kMemory = 0, kPids = 1, kCpu = 2, kCpuset = 3;

class HybridCgroup : public Cgroup {
 public:
  HybridCgroup(std::string name, std::string v2_dir, std::vector<std::string> v1_dirs)
      : Cgroup(std::move(name)), v2_dir_(std::move(v2_dir)), v1_dirs_(std::move(v1_dirs)) {}

  ~HybridCgroup() override {
    if (!removed_) {
      (void)Kill();
      for (const auto& dir : v1_dirs_) (void)cgroupfs::KillAllListed(dir);
      (void)cgroupfs::V2WaitEmpty(v2_dir_, 2000);
      (void)Remove();
    }
  }

  // Creates the directories, applies the limits and opens what the launch
  // needs. Of the v1 hierarchies, memory always, the others where `limits`
  // sets their limit or asks for every hierarchy.
  Status Init(const CgroupLimits& limits, const std::string& default_cpus, const std::string& default_mems) {
    joined_ = {true, limits.every_hierarchy || limits.pids != 0, limits.every_hierarchy || limits.cpus > 0,
               limits.every_hierarchy || !limits.cpuset.empty()};
    FR_RETURN_IF_ERROR(cgroupfs::MakeDir(v2_dir_));
    FR_ASSIGN_OR_RETURN(v2_fd_, cgroupfs::OpenDir(v2_dir_));
    for (size_t i = 0; i < kControllers.size(); ++i) {
      if (!joined_[i]) continue;
      FR_RETURN_IF_ERROR(cgroupfs::MakeDir(v1_dirs_[i]));
      created_v1_[i] = true;
    }
    // A new v1 cpuset starts with no CPUs and no memory nodes: set both.
    if (joined_[kCpuset]) {
      FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kCpuset], "cpuset.cpus", default_cpus));
      FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kCpuset], "cpuset.mems", default_mems));
    }
    FR_RETURN_IF_ERROR(ApplyLimits(limits));
    for (size_t i = 0; i < kControllers.size(); ++i) {
      if (!joined_[i]) continue;
      const std::string path = v1_dirs_[i] + "/cgroup.procs";
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
      procs_fds_.emplace_back(std::move(fd), path);
    }
    return Status::Ok();
  }

  // Takes over cgroups that exist (Adopt): the hierarchies it joined are
  // those whose directory is there.
  Status Open() {
    if (::access(v2_dir_.c_str(), F_OK) != 0) return Status::NotFound("cgroup " + name() + ": " + v2_dir_ + " is gone");
    for (size_t i = 0; i < kControllers.size(); ++i) {
      joined_[i] = created_v1_[i] = ::access(v1_dirs_[i].c_str(), F_OK) == 0;
    }
    return Status::Ok();
  }

  int clone_into_fd() const override { return v2_fd_.get(); }

  Status ApplyLimits(const CgroupLimits& limits) override {
    const std::pair<size_t, bool> wanted[] = {{kPids, limits.pids != 0}, {kCpu, limits.cpus > 0},
                                              {kCpuset, !limits.cpuset.empty()}};
    for (const auto& [index, set] : wanted) {
      if (set && !joined_[index]) {
        return Status::FailedPrecondition(std::string("cgroup: a ") + kControllers[index] +
                                          " limit for a sandbox started without that hierarchy");
      }
    }
    const std::string& memory = v1_dirs_[kMemory];
    if (limits.memory_bytes != 0) {
      const std::string bytes = std::to_string(limits.memory_bytes);
      FR_RETURN_IF_ERROR(cgroupfs::Write(memory, "memory.limit_in_bytes", bytes));
      // With swap accounting on, also bound memory+swap so swap cannot extend the limit.
      if (::access((memory + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
        FR_RETURN_IF_ERROR(cgroupfs::Write(memory, "memory.memsw.limit_in_bytes", bytes));
      }
    }
    if (limits.pids != 0) FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kPids], "pids.max", std::to_string(limits.pids)));
    if (limits.cpus > 0) {
      constexpr int64_t kPeriodUs = 100000;
      const auto quota = std::max<int64_t>(1000, std::llround(limits.cpus * kPeriodUs));
      FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kCpu], "cpu.cfs_period_us", std::to_string(kPeriodUs)));
      FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kCpu], "cpu.cfs_quota_us", std::to_string(quota)));
    }
    if (!limits.cpuset.empty()) FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kCpuset], "cpuset.cpus", limits.cpuset));
    return Status::Ok();
  }

  Status AttachParentSide(pid_t pid) override {
    const std::string value = std::to_string(pid);
    for (const auto& [fd, path] : procs_fds_) FR_RETURN_IF_ERROR(cgroupfs::WriteFd(fd.get(), value, path));
    procs_fds_.clear();
    v2_fd_.reset();
    return Status::Ok();
  }

  Status Kill() override { return cgroupfs::V2Kill(v2_dir_); }

  Status SetFrozen(bool frozen) override { return cgroupfs::V2SetFrozen(v2_dir_, frozen); }

  Result<bool> Frozen() override {
    FR_ASSIGN_OR_RETURN(uint64_t frozen, cgroupfs::ReadKey(v2_dir_, "cgroup.events", "frozen"));
    return frozen == 1;
  }

  void Abandon() override {
    procs_fds_.clear();
    v2_fd_.reset();
    removed_ = true;
  }

  Result<uint64_t> OomKillCount() override {
    return cgroupfs::ReadKey(v1_dirs_[kMemory], "memory.oom_control", "oom_kill");
  }

  Result<OomNotifier> OpenOomNotifier() override {
    // v1: "<eventfd> <oom_control fd>" written to cgroup.event_control arms
    // the eventfd; the kernel keeps its own references to both files.
    OomNotifier notifier;
    notifier.fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!notifier.fd.valid()) return Status::FromErrno(errno, "eventfd for " + v1_dirs_[kMemory]);
    const std::string control = v1_dirs_[kMemory] + "/memory.oom_control";
    UniqueFd oom(::open(control.c_str(), O_RDONLY | O_CLOEXEC));
    if (!oom.valid()) return Status::FromErrno(errno, "open " + control);
    FR_RETURN_IF_ERROR(cgroupfs::Write(v1_dirs_[kMemory], "cgroup.event_control",
                                       std::to_string(notifier.fd.get()) + " " + std::to_string(oom.get())));
    notifier.events = EPOLLIN;
    return notifier;
  }

  Status Remove() override {
    procs_fds_.clear();
    v2_fd_.reset();
    Status first;
    auto keep = [&first](Status s) {
      if (first.ok() && !s.ok()) first = std::move(s);
    };
    for (size_t i = 0; i < kControllers.size(); ++i) {
      if (created_v1_[i]) keep(cgroupfs::RemoveDir(v1_dirs_[i]));
    }
    keep(cgroupfs::RemoveDir(v2_dir_));
    removed_ = first.ok();
    return first;
  }

 private:
  std::string v2_dir_;
  std::vector<std::string> v1_dirs_;  // in kControllers order
  std::array<bool, 4> joined_ {};      // the v1 hierarchies this sandbox is in
  std::array<bool, 4> created_v1_ {};
  UniqueFd v2_fd_;
  std::vector<std::pair<UniqueFd, std::string>> procs_fds_;  // until AttachParentSide
  bool removed_ = false;
};

class HybridBackend : public CgroupBackend {
 public:
  HybridBackend(std::string v1_root, std::string v2_root) : v1_root_(std::move(v1_root)), v2_root_(std::move(v2_root)) {}

  Status Init() {
    FR_RETURN_IF_ERROR(cgroupfs::EnsureDir(v2_root_ + "/flashroll"));
    for (const char* controller : kControllers) {
      FR_RETURN_IF_ERROR(cgroupfs::EnsureDir(V1Base(controller)));
    }
    // The flashroll/ cpuset must itself have CPUs and memory nodes before children can.
    const std::string cpuset_root = v1_root_ + "/cpuset";
    FR_ASSIGN_OR_RETURN(std::string cpus, cgroupfs::Read(V1Base("cpuset"), "cpuset.cpus"));
    FR_ASSIGN_OR_RETURN(std::string mems, cgroupfs::Read(V1Base("cpuset"), "cpuset.mems"));
    if (Trim(cpus).empty()) {
      FR_ASSIGN_OR_RETURN(cpus, cgroupfs::Read(cpuset_root, "cpuset.cpus"));
      FR_RETURN_IF_ERROR(cgroupfs::Write(V1Base("cpuset"), "cpuset.cpus", Trim(cpus)));
    }
    if (Trim(mems).empty()) {
      FR_ASSIGN_OR_RETURN(mems, cgroupfs::Read(cpuset_root, "cpuset.mems"));
      FR_RETURN_IF_ERROR(cgroupfs::Write(V1Base("cpuset"), "cpuset.mems", Trim(mems)));
    }
    default_cpus_ = Trim(cpus);
    default_mems_ = Trim(mems);
    return Status::Ok();
  }

  const char* layout() const override { return "hybrid"; }

  Result<std::unique_ptr<Cgroup>> Create(const std::string& name, const CgroupLimits& limits) override {
    std::vector<std::string> v1_dirs;
    for (const char* controller : kControllers) v1_dirs.push_back(V1Base(controller) + "/" + name);
    auto cgroup = std::make_unique<HybridCgroup>(name, v2_root_ + "/flashroll/" + name, std::move(v1_dirs));
    FR_RETURN_IF_ERROR(cgroup->Init(limits, default_cpus_, default_mems_).Wrap("cgroup " + name));
    return std::unique_ptr<Cgroup>(std::move(cgroup));
  }

  Result<std::unique_ptr<Cgroup>> Adopt(const std::string& name) override {
    std::vector<std::string> v1_dirs;
    for (const char* controller : kControllers) v1_dirs.push_back(V1Base(controller) + "/" + name);
    auto cgroup = std::make_unique<HybridCgroup>(name, v2_root_ + "/flashroll/" + name, std::move(v1_dirs));
    FR_RETURN_IF_ERROR(cgroup->Open());
    return std::unique_ptr<Cgroup>(std::move(cgroup));
  }

  Result<std::vector<std::string>> List() override {
    std::set<std::string> names;
    FR_ASSIGN_OR_RETURN(auto v2, cgroupfs::ListDirs(v2_root_ + "/flashroll", kNamePrefix));
    names.insert(v2.begin(), v2.end());
    for (const char* controller : kControllers) {
      FR_ASSIGN_OR_RETURN(auto v1, cgroupfs::ListDirs(V1Base(controller), kNamePrefix));
      names.insert(v1.begin(), v1.end());
    }
    return std::vector<std::string>(names.begin(), names.end());
  }

  Status RemoveLeftover(const std::string& name) override {
    const std::string v2_dir = v2_root_ + "/flashroll/" + name;
    if (::access(v2_dir.c_str(), F_OK) == 0) {
      FR_RETURN_IF_ERROR(cgroupfs::V2Kill(v2_dir));
      FR_RETURN_IF_ERROR(cgroupfs::V2WaitEmpty(v2_dir, 2000));
    }
    for (const char* controller : kControllers) {
      const std::string dir = V1Base(controller) + "/" + name;
      FR_RETURN_IF_ERROR(cgroupfs::KillAllListed(dir));
      FR_RETURN_IF_ERROR(cgroupfs::RemoveDir(dir));
    }
    return cgroupfs::RemoveDir(v2_dir);
  }

 private:
  std::string V1Base(const char* controller) const { return v1_root_ + "/" + controller + "/flashroll"; }

  static std::string Trim(const std::string& s) {
    const size_t end = s.find_last_not_of(" \n");
    return end == std::string::npos ? std::string() : s.substr(0, end + 1);
  }

  const std::string v1_root_;
  const std::string v2_root_;
  std::string default_cpus_;
  std::string default_mems_;
};

}  // namespace

Result<std::unique_ptr<CgroupBackend>> OpenHybridCgroupBackend(const std::string& v1_root,
                                                               const std::string& v2_root) {
  auto backend = std::make_unique<HybridBackend>(v1_root, v2_root);
  FR_RETURN_IF_ERROR(backend->Init().Wrap("cgroups (hybrid layout)"));
  return std::unique_ptr<CgroupBackend>(std::move(backend));
}

}  // namespace flashroll::sandbox
