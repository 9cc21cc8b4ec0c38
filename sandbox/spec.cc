#include "sandbox/spec.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <charconv>

#include "sandbox/oci_layout.h"
#include "sandbox/seccomp.h"

namespace flashroll::sandbox {

namespace {

bool ParseUint(std::string_view text, uint64_t max, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > max) return false;
  *out = value;
  return true;
}

// Characters that would split or escape overlayfs/mount option strings.
bool SafeMountPath(const std::string& path) {
  return path.find_first_of(",:\\\n") == std::string::npos;
}

}  // namespace

Status ParseImage(std::string_view text, SandboxSpec* spec) {
  spec->image_ref.clear();
  if (text == "host") {
    spec->image = ImageKind::kHost;
    spec->image_dir.clear();
    return Status::Ok();
  }
  if (text == "busybox") {
    spec->image = ImageKind::kBusybox;
    spec->image_dir.clear();
    return Status::Ok();
  }
  std::string dir(text);
  if (dir.empty() || dir[0] != '/') {
    return Status::InvalidArgument("image '" + dir + "': expected host, busybox or an absolute directory");
  }
  // An image directory may not contain ':' (ValidateSpec), so the first one
  // starts the reference, which may itself contain ':'.
  std::string ref;
  if (const size_t colon = dir.find(':'); colon != std::string::npos) {
    ref = dir.substr(colon + 1);
    dir.resize(colon);
    if (ref.empty()) return Status::InvalidArgument("image '" + std::string(text) + "': empty reference after ':'");
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "image: stat " + dir);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("image " + dir + ": not a directory");
  if (!ref.empty() && !IsOciLayout(dir)) {
    return Status::InvalidArgument("image " + dir + ": :" + ref + " needs an OCI image layout (no oci-layout file)");
  }
  spec->image = ImageKind::kDirectory;
  spec->image_dir = dir;
  spec->image_ref = ref;
  return Status::Ok();
}

Result<NetMode> ParseNetMode(std::string_view text) {
  if (text == "none") return NetMode::kNone;
  if (text == "policy") return NetMode::kPolicy;
  return Status::InvalidArgument("net mode '" + std::string(text) + "': expected none or policy");
}

Result<AllowRule> ParseAllowRule(std::string_view text) {
  const std::string rule(text);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("allow rule '" + rule + "': " + why + " (expected IP[/N]:PORT)");
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("missing :PORT");
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  AllowRule out;
  out.text = rule;
  if (port_text != "*") {
    uint64_t port = 0;
    if (!ParseUint(port_text, 65535, &port) || port == 0) return bad("port must be 1..65535 or *");
    out.port = static_cast<uint16_t>(port);
  }
  std::string_view prefix_text;
  if (const size_t slash = host.find('/'); slash != std::string_view::npos) {
    prefix_text = host.substr(slash + 1);
    host = host.substr(0, slash);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string address(host);
  if (inet_pton(AF_INET, address.c_str(), out.address) == 1) {
    out.family = AF_INET;
    out.prefix_len = 32;
  } else if (inet_pton(AF_INET6, address.c_str(), out.address) == 1) {
    out.family = AF_INET6;
    out.prefix_len = 128;
  } else {
    return bad("'" + address + "' is not an IPv4 or IPv6 address");
  }
  if (!prefix_text.empty()) {
    uint64_t prefix = 0;
    if (!ParseUint(prefix_text, static_cast<uint64_t>(out.prefix_len), &prefix)) {
      return bad("prefix length must be 0.." + std::to_string(out.prefix_len));
    }
    out.prefix_len = static_cast<int>(prefix);
  }
  return out;
}

Status CheckExecUser(std::string_view field, std::string_view value) {
  if (value.size() > 255) return Status::InvalidArgument(std::string(field) + ": longer than 255 characters");
  for (const char c : value) {
    if (c == ':' || c == ',' || c == '\n' || c == '\0') {
      return Status::InvalidArgument(std::string(field) + " '" + std::string(value) +
                                     "': a name or number may not contain ':', ',', a newline or NUL");
    }
  }
  return Status::Ok();
}

Status ParseUserGroup(std::string_view text, std::string* user, std::string* group) {
  const size_t colon = text.find(':');
  *user = std::string(text.substr(0, colon));
  *group = colon == std::string_view::npos ? std::string() : std::string(text.substr(colon + 1));
  if (colon != std::string_view::npos && group->empty()) {
    return Status::InvalidArgument("'" + std::string(text) + "': expected USER[:GROUP] with a group after ':'");
  }
  FR_RETURN_IF_ERROR(CheckExecUser("user", *user));
  return CheckExecUser("group", *group);
}

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  constexpr uint64_t kMaxCpu = 4095;
  const Status bad = Status::InvalidArgument("cpuset '" + std::string(text) +
                                             "': expected a list such as 0-1,3 (CPUs 0.." + std::to_string(kMaxCpu) + ")");
  std::vector<bool> set(kMaxCpu + 1, false);
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    const size_t dash = item.find('-');
    uint64_t first = 0, last = 0;
    if (!ParseUint(item.substr(0, dash), kMaxCpu, &first)) return bad;
    last = first;
    if (dash != std::string_view::npos && !ParseUint(item.substr(dash + 1), kMaxCpu, &last)) return bad;
    if (last < first) return bad;
    for (uint64_t cpu = first; cpu <= last; ++cpu) set[cpu] = true;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::vector<int> cpus;
  for (size_t cpu = 0; cpu < set.size(); ++cpu) {
    if (set[cpu]) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

void ApplyImageDefaults(const ImageDefaults& defaults, SandboxSpec* spec) {
  if (spec->user.empty() && spec->group.empty()) {
    spec->user = defaults.user;
    spec->group = defaults.group;
  }
  if (spec->workdir.empty()) spec->workdir = defaults.workdir;
}

Status CheckWorkdir(std::string_view field, std::string_view value) {
  if (value.empty()) return Status::Ok();
  if (value[0] != '/') {
    return Status::InvalidArgument(std::string(field) + " '" + std::string(value) + "': must be an absolute path");
  }
  if (value.size() > 4096) return Status::InvalidArgument(std::string(field) + ": longer than 4096 characters");
  if (value.find_first_of(std::string_view("\n\0", 2)) != std::string_view::npos) {
    return Status::InvalidArgument(std::string(field) + ": may not contain a newline or NUL");
  }
  return Status::Ok();
}

Status ValidateSpec(const SandboxSpec& spec) {
  FR_RETURN_IF_ERROR(CheckExecUser("user", spec.user));
  FR_RETURN_IF_ERROR(CheckExecUser("group", spec.group));
  FR_RETURN_IF_ERROR(CheckWorkdir("workdir", spec.workdir));
  if (spec.image == ImageKind::kDirectory) {
    if (spec.image_dir.empty() || spec.image_dir[0] != '/') {
      return Status::InvalidArgument("image: directory must be an absolute path");
    }
    if (!SafeMountPath(spec.image_dir)) {
      return Status::InvalidArgument("image " + spec.image_dir + ": path may not contain , : \\ or newlines");
    }
    if (spec.image_dir == "/run/flashroll" || spec.image_dir.rfind("/run/flashroll/", 0) == 0) {
      return Status::InvalidArgument("image " + spec.image_dir + ": may not be under /run/flashroll");
    }
  }
  if (!spec.allow.empty() && spec.net != NetMode::kPolicy) {
    return Status::InvalidArgument("allow rules need --net policy");
  }
  if (spec.pids < 0) return Status::InvalidArgument("pids: must be >= 0");
  if (spec.cpus < 0 || spec.cpus > 4096) return Status::InvalidArgument("cpus: must be in 0..4096");
  if (spec.memory_bytes != 0 && spec.memory_bytes < (uint64_t{4} << 20)) {
    return Status::InvalidArgument("memory: must be at least 4M");
  }
  if (spec.disk_bytes < (uint64_t{1} << 20)) return Status::InvalidArgument("disk: must be at least 1M");
  if (!spec.cpuset.empty()) FR_RETURN_IF_ERROR(ParseCpuList(spec.cpuset).status());
  for (const auto& path : spec.rw_paths) {
    if (path.empty() || path[0] != '/') return Status::InvalidArgument("rw path '" + path + "': must be absolute");
    if (path == "/") return Status::InvalidArgument("rw path '/': binding the host root is not allowed");
    if (path.find("/../") != std::string::npos || path.ends_with("/..")) {
      return Status::InvalidArgument("rw path '" + path + "': may not contain '..'");
    }
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "rw path: stat " + path);
  }
  if (spec.hostname.empty() || spec.hostname.size() > 64) {
    return Status::InvalidArgument("hostname: must be 1..64 characters");
  }
  if (spec.seccomp != "default") {
    if (spec.seccomp.empty() || spec.seccomp[0] != '/') {
      return Status::InvalidArgument("seccomp '" + spec.seccomp + "': expected default or an absolute file path");
    }
    // Compiling here reports a bad profile as bad input before anything is created; the result is cached.
    if (auto program = SeccompProgramFor(spec.seccomp); !program.ok()) return program.status().Wrap("seccomp");
  }
  return Status::Ok();
}

}  // namespace flashroll::sandbox
