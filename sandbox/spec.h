// SandboxSpec: the one typed description of a sandbox.
//
// The CLI flags, the HTTP API and YAML configs all fill this struct; every
// isolation step reads it and nothing else. Parsing helpers turn the
// textual forms ("busybox", "10.0.0.0/8:443", "none") into fields and
// report bad input as kInvalidArgument naming the flag value.
//
// Thread safety: a SandboxSpec is a value.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sandbox/held_path.h"

namespace flashroll::sandbox {

enum class ImageKind {
  kHost,       // read-only binds of the host's /usr and /etc essentials
  kBusybox,    // /bin/busybox from Debian's busybox-static plus applet links
  kDirectory,  // any directory tree, used as the read-only lower layer
};

enum class NetMode {
  kNone,    // a fresh network namespace with loopback only
  kPolicy,  // veth plus eBPF allow rules
};

// One egress allow rule: an address prefix and a port (0 = any port).
struct AllowRule {
  int family = 0;          // AF_INET or AF_INET6
  uint8_t address[16] = {};  // network byte order; the first 4 bytes for AF_INET
  int prefix_len = 0;
  uint16_t port = 0;
  std::string text;        // as given, for messages
};

struct SandboxSpec {
  ImageKind image = ImageKind::kHost;
  std::string image_dir;  // kDirectory: absolute path of the lower layer or OCI image layout
  std::string image_ref;  // an OCI layout's org.opencontainers.image.ref.name; empty: its default

  NetMode net = NetMode::kNone;
  std::vector<AllowRule> allow;  // only with NetMode::kPolicy

  uint64_t memory_bytes = 0;  // 0: no limit
  int64_t pids = 0;           // 0: no limit
  double cpus = 0;            // CPU quota in CPUs; 0: no quota
  std::string cpuset;         // e.g. "0-1"; empty: all CPUs of the manager
  // Bytes of the writable layer (the root's /tmp, /var/tmp, ...): its own
  // ext4 filesystem on disk (disk.h; one inode per 16 KiB), not memory.
  uint64_t disk_bytes = uint64_t{1} << 30;

  // Host paths bound read-write at the same path inside.
  std::vector<std::string> rw_paths;
  // The descriptors rw_paths were checked through (AdmitSpec), one per
  // path in order; what gets bound. Empty: the manager opens each path
  // itself (HoldHostPath). Never sent on the wire.
  HeldPaths rw_held;
  std::string hostname = "sandbox";
  // Default environment of every exec.
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
      "LANG=C.UTF-8", "TERM=xterm"};
  // Who runs an exec that names no user (ExecRequest::user, ::group);
  // empty: root.
  std::string user;
  std::string group;
  // Where an exec that names no cwd runs (ExecRequest::cwd); empty: "/".
  std::string workdir;
  // Destroyed automatically this long after creation; 0: never.
  std::chrono::milliseconds ttl{0};
  // The syscall filter: "default" (sandbox/seccomp.h) or the absolute path
  // of a JSON profile file (sandbox/seccomp_profile.h).
  std::string seccomp = "default";
};

// "host", "busybox", an absolute directory path, or "DIR:REF" for the image
// of the OCI layout DIR whose ref.name annotation is REF. Sets spec->image,
// spec->image_dir and spec->image_ref. Returns kInvalidArgument for a
// relative path or a REF on a directory that is no OCI layout, kNotFound
// when the directory does not exist.
Status ParseImage(std::string_view text, SandboxSpec* spec);

// "none" or "policy".
Result<NetMode> ParseNetMode(std::string_view text);

// "IP[/N]:PORT" with an IPv4 or IPv6 address; the port is after the last
// ':' and may be '*' for any port. Returns kInvalidArgument naming the rule.
Result<AllowRule> ParseAllowRule(std::string_view text);

// An exec user or group as given (a name or a number; empty: none):
// kInvalidArgument naming `field` for ':', ',', a newline, NUL or more than
// 255 characters.
Status CheckExecUser(std::string_view field, std::string_view value);

// "USER[:GROUP]" (the --user flag's form) into its parts, each checked by
// CheckExecUser; ":GROUP" alone keeps root with that group.
Status ParseUserGroup(std::string_view text, std::string* user, std::string* group);

// What an image says its processes run as and where (an OCI image config's
// User and WorkingDir; image_store.h keeps them for imported images).
struct ImageDefaults {
  std::string user;   // empty: root
  std::string group;  // empty: the user's primary group
  std::string workdir;  // empty: "/"
};

// The image's defaults where the spec names none: user and group when the
// spec gives neither (an explicit user or group wins whole), workdir when
// the spec gives none.
void ApplyImageDefaults(const ImageDefaults& defaults, SandboxSpec* spec);

// A working directory as given: empty, or an absolute path of at most 4096
// characters without a newline or NUL; kInvalidArgument naming `field`.
Status CheckWorkdir(std::string_view field, std::string_view value);

// The CPUs of a cpuset list ("0-3,6", as cpuset.cpus takes it), sorted
// and distinct; every index below 4096. kInvalidArgument naming the list
// for anything else ("3-1", "0-", "", "a").
Result<std::vector<int>> ParseCpuList(std::string_view text);

// Checks the fields against each other: allow rules need --net policy,
// limits are in range, paths are absolute and free of characters that
// overlayfs options cannot carry, a seccomp profile file parses and
// compiles. Returns kInvalidArgument naming the field (and, for a profile,
// the file and the field inside it).
Status ValidateSpec(const SandboxSpec& spec);

}  // namespace flashroll::sandbox
