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
#include <string_view>
#include <utility>

#include "common/json.h"
#include "sandbox/seccomp_profile.h"

namespace flashroll::sandbox {

namespace {

// What a sandbox may call: the system calls Docker's default profile allows
// a process without capabilities (moby's profiles/seccomp/default.json), for
// the architectures we build for (x86-64, aarch64; a name the native one
// lacks is skipped), less kDenied and the never-implemented epoll_*_old.
// Calls Docker grants only with a capability are left out, and so fail with
// ENOSYS (mbind, sethostname, ...).
constexpr const char* kAllowed[] = {
    // Files and directories.
    "access", "faccessat", "faccessat2", "chdir", "fchdir", "getcwd", "chmod", "fchmod", "fchmodat", "fchmodat2",
    "chown", "fchown", "fchownat", "lchown", "umask", "open", "openat", "openat2", "creat", "close", "close_range",
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "getdents", "getdents64", "mkdir",
    "mkdirat", "mknod", "mknodat", "rmdir", "link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat",
    "rename", "renameat", "renameat2", "readlink", "readlinkat", "truncate", "ftruncate", "fallocate",
    "fadvise64", "readahead", "flock", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "utime",
    "utimes", "utimensat", "futimesat", "getxattr", "lgetxattr", "fgetxattr", "getxattrat", "setxattr",
    "lsetxattr", "fsetxattr", "setxattrat", "listxattr", "llistxattr", "flistxattr", "listxattrat",
    "removexattr", "lremovexattr", "fremovexattr", "removexattrat", "inotify_init", "inotify_init1",
    "inotify_add_watch", "inotify_rm_watch", "fanotify_mark", "cachestat", "statmount", "listmount",
    // Reading, writing and waiting on file descriptors.
    "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev", "pwritev2", "lseek",
    "sendfile", "splice", "tee", "vmsplice", "copy_file_range", "dup", "dup2", "dup3", "fcntl", "pipe", "pipe2",
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_gettime", "timerfd_settime", "memfd_create", "memfd_secret", "io_setup", "io_destroy", "io_submit",
    "io_cancel", "io_getevents", "io_pgetevents",
    // Sockets (socket itself is checked by family below).
    "socketpair", "bind", "listen", "accept", "accept4", "connect", "shutdown", "getsockname", "getpeername",
    "getsockopt", "setsockopt", "sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
    // System V and POSIX IPC, private to the sandbox's IPC namespace.
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget", "shmat", "shmdt",
    "shmctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    // Memory.
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2", "mlockall",
    "munlock", "munlockall", "remap_file_pages", "pkey_alloc", "pkey_free", "pkey_mprotect", "membarrier", "mseal",
    "map_shadow_stack", "process_mrelease",
    // Processes and threads (clone is checked by flags below).
    "execve", "execveat", "fork", "vfork", "exit", "exit_group", "wait4", "waitid", "getpid", "getppid", "gettid",
    "getpgid", "setpgid", "getpgrp", "getsid", "setsid", "set_tid_address", "set_robust_list", "get_robust_list",
    "rseq", "futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "arch_prctl",
    "get_thread_area", "set_thread_area", "prctl", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
    "landlock_restrict_self", "uretprobe", "restart_syscall",
    // Credentials and chroot: root inside changes them with the capabilities
    // it keeps in its own user namespace (caps.h: CAP_SETUID, CAP_SETGID,
    // CAP_SYS_CHROOT), which reach only its own ids and its own tree.
    "chroot", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid", "setgid",
    "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capget", "capset",
    // Scheduling and resource limits.
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr", "sched_setattr", "sched_getparam",
    "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "getpriority", "setpriority", "ioprio_get", "ioprio_set",
    "getrlimit", "setrlimit", "prlimit64", "getrusage", "getcpu",
    // Signals.
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "kill", "tkill", "tgkill", "pidfd_open",
    "pidfd_send_signal", "pause", "alarm",
    // Time and system information.
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "times", "getitimer",
    "setitimer", "timer_create", "timer_delete", "timer_gettime", "timer_settime", "timer_getoverrun", "uname",
    "sysinfo", "getrandom",
};

// What exists but a sandbox must never do; EPERM is the kernel's own answer
// to a caller without the privilege. Docker leaves most of these to a
// capability; ptrace, process_vm_*, adjtimex, clock_adjtime,
// name_to_handle_at and modify_ldt it allows, and we do not (modify_ldt:
// 16-bit segments nothing a sandbox runs needs, and a long record of
// kernel bugs).
constexpr const char* kDenied[] = {
    "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "pidfd_getfd", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
    "perf_event_open", "keyctl", "add_key", "request_key", "acct", "swapon", "swapoff", "reboot", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "quotactl", "quotactl_fd", "open_by_handle_at",
    "name_to_handle_at", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "iopl", "ioperm",
    "syslog", "vhangup", "fanotify_init", "modify_ldt",
};

// Socket families: local, IP and netlink (which glibc's getaddrinfo and
// getifaddrs use). vsock is denied outright: no network namespace confines it.
constexpr unsigned long kSocketFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

// The personas Docker allows: Linux, 32-bit Linux, each with UNAME26, and
// the query. Others, such as ADDR_NO_RANDOMIZE, would weaken the process.
constexpr unsigned long kPersonalities[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

// Given two actions for one call, libseccomp silently keeps one of them.
constexpr bool ListsAreDisjoint() {
  for (std::string_view allowed : kAllowed) {
    for (std::string_view denied : kDenied) {
      if (allowed == denied) return false;
    }
  }
  return true;
}
static_assert(ListsAreDisjoint(), "a system call is both in kAllowed and in kDenied");

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

// Adds `action` for `name` if the native architecture and this libseccomp
// know the call; a call newer than libseccomp stays unlisted (ENOSYS).
Status AddByName(void* ctx, uint32_t action, const char* name) {
  const int nr = seccomp_syscall_resolve_name(name);
  if (nr < 0) return Status::Ok();
  return Check(seccomp_rule_add(ctx, action, nr, 0), name);
}

Result<SeccompProgram> CompileDefault() {
  FR_ASSIGN_OR_RETURN(Ctx ctx, NewCtx(SCMP_ACT_ERRNO(ENOSYS)));
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kAllowed) FR_RETURN_IF_ERROR(AddByName(ctx.get(), SCMP_ACT_ALLOW, name));
  for (const char* name : kDenied) FR_RETURN_IF_ERROR(AddByName(ctx.get(), eperm, name));
  // clone without namespace flags; clone3, whose flags sit in memory the
  // filter cannot read, is unlisted, and its ENOSYS makes libc use clone.
  unsigned long namespaces = 0;
  for (unsigned long flag : kNamespaceFlags) {
    namespaces |= flag;
    FR_RETURN_IF_ERROR(Check(
        seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)), "clone flags"));
  }
  FR_RETURN_IF_ERROR(Check(
      seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, namespaces, 0)),
      "clone"));
  for (unsigned long family : kSocketFamilies) {
    FR_RETURN_IF_ERROR(Check(
        seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, family)), "socket"));
  }
  FR_RETURN_IF_ERROR(
      Check(seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_VSOCK)), "socket vsock"));
  for (unsigned long persona : kPersonalities) {
    FR_RETURN_IF_ERROR(Check(
        seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(personality), 1, SCMP_A0(SCMP_CMP_EQ, persona)),
        "personality"));
  }
  // ioctl: every request but terminal injection. The kernel reads the
  // request's low 32 bits only, so the denial masks them. The two rules
  // overlap: libseccomp tests equality before ranges on one argument,
  // whatever the order the rules were added in (src/db.c, _db_chain_lt),
  // and SandboxSeccompTest.IoctlDeniesTerminalInjectionOnly holds it to that.
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    FR_RETURN_IF_ERROR(Check(
        seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, request)),
        "ioctl"));
  }
  FR_RETURN_IF_ERROR(
      Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_GE, 0)), "ioctl"));
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

std::string DefaultSeccompOciJson() {
  auto names = [](const auto& list) {
    Json known = Json::array();
    for (const char* name : list) {
      if (seccomp_syscall_resolve_name(name) >= 0) known.push_back(name);
    }
    return known;
  };
  auto rule = [](const char* name, const char* action, Json args) {
    Json r = {{"names", {name}}, {"action", action}, {"args", std::move(args)}};
    if (std::string_view(action) == "SCMP_ACT_ERRNO") r["errnoRet"] = EPERM;
    return r;
  };
  auto arg = [](unsigned index, const char* op, unsigned long value, unsigned long value_two = 0) {
    return Json{{"index", index}, {"value", value}, {"valueTwo", value_two}, {"op", op}};
  };
  Json syscalls = Json::array();
  syscalls.push_back({{"names", names(kAllowed)}, {"action", "SCMP_ACT_ALLOW"}});
  syscalls.push_back({{"names", names(kDenied)}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", EPERM}});
  unsigned long namespaces = 0;
  for (unsigned long flag : kNamespaceFlags) {
    namespaces |= flag;
    syscalls.push_back(rule("clone", "SCMP_ACT_ERRNO", {arg(0, "SCMP_CMP_MASKED_EQ", flag, flag)}));
  }
  syscalls.push_back(rule("clone", "SCMP_ACT_ALLOW", {arg(0, "SCMP_CMP_MASKED_EQ", namespaces, 0)}));
  for (unsigned long family : kSocketFamilies) {
    syscalls.push_back(rule("socket", "SCMP_ACT_ALLOW", {arg(0, "SCMP_CMP_EQ", family)}));
  }
  syscalls.push_back(rule("socket", "SCMP_ACT_ERRNO", {arg(0, "SCMP_CMP_EQ", AF_VSOCK)}));
  for (unsigned long persona : kPersonalities) {
    syscalls.push_back(rule("personality", "SCMP_ACT_ALLOW", {arg(0, "SCMP_CMP_EQ", persona)}));
  }
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    syscalls.push_back(rule("ioctl", "SCMP_ACT_ERRNO", {arg(1, "SCMP_CMP_MASKED_EQ", 0xffffffffUL, request)}));
  }
  syscalls.push_back(rule("ioctl", "SCMP_ACT_ALLOW", {arg(1, "SCMP_CMP_GE", 0)}));
  const Json profile = {{"defaultAction", "SCMP_ACT_ERRNO"},
                        {"defaultErrnoRet", ENOSYS},
                        {"architectures", {seccomp_arch_native() == SCMP_ARCH_AARCH64 ? "SCMP_ARCH_AARCH64"
                                                                                       : "SCMP_ARCH_X86_64"}},
                        {"syscalls", std::move(syscalls)}};
  return DumpJson(profile, 2);
}

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
