#include "sandbox/seccomp.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "sandbox/seccomp_profile.h"

namespace flashroll::sandbox {

namespace {

constexpr const char* kDenied[] = {
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "bpf", "perf_event_open", "unshare", "setns", "keyctl", "add_key", "request_key", "acct",
    "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime",
    "quotactl", "quotactl_fd", "nfsservctl", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "iopl", "ioperm", "syslog", "uselib",
    "ustat", "sysfs", "_sysctl", "vhangup", "vm86", "vm86old", "fanotify_init", "pidfd_getfd",
};

constexpr unsigned long kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                             CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

Status Check(int rc, const std::string& what) {
  if (rc < 0) return Status::Internal("seccomp: " + what + ": " + std::string(strerror(-rc)));
  return Status::Ok();
}

using Ctx = std::unique_ptr<void, CtxDeleter>;

Result<Ctx> NewCtx(uint32_t default_action) {
  Ctx ctx(seccomp_init(default_action));
  if (!ctx) return Status::Internal("seccomp: seccomp_init failed");
  // no_new_privs is set by the caps step; the exported program must not depend on libseccomp setting it.
  FR_RETURN_IF_ERROR(Check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0), "attr NNP"));
  FR_RETURN_IF_ERROR(Check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "attr BADARCH"));
  return ctx;
}

Result<SeccompProgram> Export(void* ctx) {
  // libseccomp 2.5 exports only to a file descriptor.
  const int fd = ::memfd_create("flashroll-seccomp", MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "seccomp: memfd_create");
  Status status = Check(seccomp_export_bpf(ctx, fd), "export");
  SeccompProgram program;
  if (status.ok()) {
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0) {
      status = Status::Internal("seccomp: exported program has size " + std::to_string(size));
    } else {
      program.instructions.resize(static_cast<size_t>(size) / sizeof(sock_filter));
      if (::pread(fd, program.instructions.data(), static_cast<size_t>(size), 0) != size) {
        status = Status::FromErrno(errno, "seccomp: read exported program");
      }
    }
  }
  ::close(fd);
  FR_RETURN_IF_ERROR(status);
  return program;
}

Result<SeccompProgram> CompileDefault() {
  FR_ASSIGN_OR_RETURN(Ctx ctx, NewCtx(SCMP_ACT_ALLOW));
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kDenied) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr < 0) continue;  // not a system call on this architecture
    FR_RETURN_IF_ERROR(Check(seccomp_rule_add(ctx.get(), eperm, nr, 0), std::string("deny ") + name));
  }
  FR_RETURN_IF_ERROR(Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3"));
  for (unsigned long flag : kNamespaceFlags) {
    FR_RETURN_IF_ERROR(Check(
        seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)), "clone flags"));
  }
  FR_RETURN_IF_ERROR(
      Check(seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_VSOCK)), "socket vsock"));
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    FR_RETURN_IF_ERROR(Check(
        seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, request)),
        "ioctl"));
  }
  return Export(ctx.get());
}

Result<SeccompProgram> CompileProfile(const SeccompProfile& profile) {
  FR_ASSIGN_OR_RETURN(Ctx ctx, NewCtx(profile.default_action));
  for (size_t i = 0; i < profile.rules.size(); ++i) {
    const SeccompRule& rule = profile.rules[i];
    // libseccomp refuses a rule whose action is the default one; it would change nothing.
    if (rule.action == profile.default_action) continue;
    std::vector<scmp_arg_cmp> args;
    for (const SeccompArg& arg : rule.args) {
      args.push_back(scmp_arg_cmp{arg.index, static_cast<scmp_compare>(arg.op), arg.value, arg.value_two});
    }
    for (int nr : rule.syscalls) {
      FR_RETURN_IF_ERROR(Check(seccomp_rule_add_array(ctx.get(), rule.action, nr, static_cast<unsigned>(args.size()),
                                                      args.data()),
                               "syscalls[" + std::to_string(i) + "] system call " + std::to_string(nr)));
    }
  }
  return Export(ctx.get());
}

}  // namespace

Result<const SeccompProgram*> DefaultSeccompProgram() {
  static const Result<SeccompProgram> program = CompileDefault();
  if (!program.ok()) return program.status();
  return &program.value();
}

Result<const SeccompProgram*> SeccompProgramFor(const std::string& choice) {
  if (choice == "default") return DefaultSeccompProgram();
  struct stat st {};
  if (::stat(choice.c_str(), &st) != 0) return Status::FromErrno(errno, "seccomp profile: stat " + choice);
  using Key = std::pair<std::string, std::pair<int64_t, int64_t>>;
  const Key key{choice, {static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec)}};
  static std::mutex mu;
  static auto* cache = new std::map<Key, std::unique_ptr<const SeccompProgram>>();  // never freed: see header
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second.get();
  FR_ASSIGN_OR_RETURN(SeccompProfile profile, ReadSeccompProfile(choice));
  auto program = CompileProfile(profile);
  if (!program.ok()) return program.status().Wrap(choice);
  auto it = cache->emplace(key, std::make_unique<const SeccompProgram>(std::move(*program))).first;
  return it->second.get();
}

ChildStatus SeccompChild(const SeccompProgram& program) {
  struct sock_fprog prog {};
  prog.len = static_cast<unsigned short>(program.instructions.size());
  prog.filter = const_cast<sock_filter*>(program.instructions.data());
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    return ChildStatus::Errno("seccomp", "seccomp(SECCOMP_SET_MODE_FILTER)", nullptr);
  }
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
