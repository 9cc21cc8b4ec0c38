// No cgroups: the unprivileged fallback. Sandboxes run in a user namespace
// without resource limits; killing the init ends the sandbox (its pid
// namespace goes with it), freezing is not possible, and nothing is left in
// any cgroup tree to reclaim.
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "sandbox/cgroup_backends.h"

namespace flashroll::sandbox {

namespace {

class NoCgroup : public Cgroup {
 public:
  explicit NoCgroup(std::string name) : Cgroup(std::move(name)) {}

  int clone_into_fd() const override { return -1; }
  Status AttachParentSide(pid_t) override { return Status::Ok(); }
  Status ApplyLimits(const CgroupLimits&) override { return Status::Ok(); }
  Status Kill() override { return Status::Ok(); }  // KillAndReapInit ends the pid namespace
  Status SetFrozen(bool) override {
    return Status::FailedPrecondition("freeze: needs cgroups (the manager runs without root)");
  }
  Result<uint64_t> OomKillCount() override { return uint64_t{0}; }
  Result<OomNotifier> OpenOomNotifier() override {
    // Never signalled: without a memory limit there is no sandbox OOM to see.
    OomNotifier notifier;
    notifier.fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!notifier.fd.valid()) return Status::FromErrno(errno, "eventfd");
    notifier.events = EPOLLIN;
    return notifier;
  }
  Result<bool> Frozen() override { return false; }
  void Abandon() override {}
  Status Remove() override { return Status::Ok(); }
};

class NoCgroupBackend : public CgroupBackend {
 public:
  const char* layout() const override { return "none"; }
  Result<std::unique_ptr<Cgroup>> Create(const std::string& name, const CgroupLimits&) override {
    return std::unique_ptr<Cgroup>(new NoCgroup(name));
  }
  Result<std::unique_ptr<Cgroup>> Adopt(const std::string& name) override {
    return Status::FailedPrecondition("cgroup " + name + ": kept sandboxes need cgroups (a manager with root)");
  }
  Result<std::vector<std::string>> List() override { return std::vector<std::string>(); }
  Status RemoveLeftover(const std::string&) override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<CgroupBackend> NewNoCgroupBackend() { return std::make_unique<NoCgroupBackend>(); }

}  // namespace flashroll::sandbox
