#include "sandbox/api/policy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>

#include "sandbox/held_path.h"
#include "sandbox/image_store.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox::api {

namespace {

namespace fs = std::filesystem;

// "4G", "512M", "64K" or "1000 bytes": the form a config or request uses.
std::string ByteText(uint64_t bytes) {
  for (const auto& [shift, unit] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    if (bytes != 0 && bytes % (uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  }
  return std::to_string(bytes) + " bytes";
}

template <typename Value>
std::string Known(const std::map<std::string, Value>& names, std::initializer_list<const char*> builtins) {
  std::string out;
  for (const char* name : builtins) out += (out.empty() ? "" : ", ") + std::string(name);
  for (const auto& [name, unused] : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Status ResolveImage(const NodePolicy& policy, const std::string& image, const std::string& field, SandboxSpec* spec) {
  if (image == "host" || image == "busybox") return ParseImage(image, spec);
  if (image.find('/') != std::string::npos) {
    return Status::PermissionDenied(field + ": \"" + image + "\" is a path; this node serves images by name (" +
                                    Known(policy.images, {"host", "busybox"}) + ")");
  }
  const auto it = policy.images.find(image);
  if (it == policy.images.end()) {
    return Status::PermissionDenied(field + ": unknown image \"" + image + "\" (this node serves " +
                                    Known(policy.images, {"host", "busybox"}) + ")");
  }
  spec->image = ImageKind::kDirectory;
  spec->image_dir = it->second.tree;
  spec->image_ref.clear();
  ApplyImageDefaults(it->second.defaults, spec);
  return Status::Ok();
}

Status ResolveSeccomp(const NodePolicy& policy, const std::string& field, SandboxSpec* spec) {
  const std::string name = spec->seccomp;
  if (name == "default") return Status::Ok();
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    return Status::PermissionDenied(field + ": \"" + name + "\" is a path; name a profile (" +
                                    Known(policy.seccomp_profiles, {"default"}) + ")");
  }
  const auto it = policy.seccomp_profiles.find(name);
  if (it == policy.seccomp_profiles.end()) {
    return Status::PermissionDenied(field + ": unknown seccomp profile \"" + name + "\" (this node has " +
                                    Known(policy.seccomp_profiles, {"default"}) + ")");
  }
  spec->seccomp = it->second;
  return Status::Ok();
}

// What `path` names, opened once without ever looking outside `root` and
// without following a symlink: openat2 with RESOLVE_BENEATH fails with
// EXDEV at the first `..` that would leave it, and RESOLVE_NO_SYMLINKS with
// ELOOP at any symlink, so a request cannot even learn whether a path
// outside the root exists, and a component swapped for a symlink later
// cannot move the bind: the descriptor opened here is what gets bound
// (held_path.h).
Result<std::shared_ptr<const HeldPath>> ResolveBeneath(const std::string& root, const std::string& path,
                                                       const std::string& name) {
  const std::string denied = name + ": " + path + " is not beneath the workspace root " + root;
  // The trailing '/' keeps /srv/ws2 out for the root /srv/ws.
  if (!path.starts_with(root + "/")) return Status::PermissionDenied(denied);
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Status::FromErrno(errno, "open " + root);
  const std::string relative = path.size() == root.size() + 1 ? "." : path.substr(root.size() + 1);
  open_how how {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root_fd.get(), relative.c_str(), &how, sizeof(how))));
  if (!fd.valid()) {
    if (errno == EXDEV) return Status::PermissionDenied(denied + " (it leads out of it)");
    if (errno == ELOOP) {
      return Status::PermissionDenied(name + ": " + path +
                                      " has a symlink on the way; rw paths are resolved without following symlinks");
    }
    return Status::FromErrno(errno, name + ": " + path);
  }
  // Where it is bound inside: the path as asked, normalised. With no
  // symlink on the way, its `.` and `..` mean what they meant to openat2;
  // the descriptor's current name (readlink of /proc/self/fd) would be
  // wherever a rename since has put it.
  std::string bound = fs::path(root + "/" + relative).lexically_normal().string();
  while (bound.size() > 1 && bound.back() == '/') bound.pop_back();
  return HoldOpenPath(std::move(fd), std::move(bound));
}

// Replaces each rw path by its normal form and keeps the descriptor it was
// resolved through, so what is checked is what gets bound.
Status ResolveRwPaths(const NodePolicy& policy, const std::string& field, SandboxSpec* spec) {
  spec->rw_held.clear();
  for (size_t i = 0; i < spec->rw_paths.size(); ++i) {
    const std::string name = field + "[" + std::to_string(i) + "]";
    const std::string& path = spec->rw_paths[i];
    // Malformed before forbidden: a relative path means nothing on any node.
    if (path.empty() || path[0] != '/') {
      return Status::InvalidArgument(name + ": rw path '" + path + "': must be absolute");
    }
    if (policy.workspace_root.empty()) {
      return Status::PermissionDenied(name + ": " + path +
                                      ": this node binds no host paths (its config has no workspace_root)");
    }
    FR_ASSIGN_OR_RETURN(std::shared_ptr<const HeldPath> held, ResolveBeneath(policy.workspace_root, path, name));
    // The root holds every workspace.
    if (held->path == policy.workspace_root) {
      return Status::PermissionDenied(name + ": " + path + " is the workspace root itself, not a workspace in it");
    }
    if (policy.workspace_disks) {
      const std::string inside = held->path.substr(policy.workspace_root.size() + 1);
      const std::string workspace = inside.substr(0, inside.find('/'));
      if (!policy.workspace_disks->Holds(workspace, held->dev)) {
        return Status::PermissionDenied(name + ": " + path + " is not on the workspace disk " + policy.workspace_root +
                                        "/" + workspace + " (POST /v1/workspaces makes one; what is bound must be "
                                        "bounded)");
      }
    }
    spec->rw_paths[i] = held->path;
    spec->rw_held.push_back(std::move(held));
  }
  return Status::Ok();
}

// Whether `rule` covers `address` (same family, the rule's prefix bits equal).
bool Covers(const AllowRule& rule, int family, const uint8_t* address) {
  if (rule.family != family) return false;
  for (int bit = 0; bit < rule.prefix_len; ++bit) {
    const int mask = 0x80 >> (bit % 8);
    if ((rule.address[bit / 8] & mask) != (address[bit / 8] & mask)) return false;
  }
  return true;
}

// This node's own addresses (every interface's) and the link-local metadata
// address: what a sandbox's egress must not reach unless the node allows it.
std::vector<std::pair<int, std::array<uint8_t, 16>>> HostLocalAddresses() {
  std::vector<std::pair<int, std::array<uint8_t, 16>>> out;
  std::array<uint8_t, 16> metadata{169, 254, 169, 254};
  out.emplace_back(AF_INET, metadata);
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    std::array<uint8_t, 16> bytes{};
    if (a->ifa_addr->sa_family == AF_INET) {
      std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    out.emplace_back(a->ifa_addr->sa_family, bytes);
  }
  ::freeifaddrs(list);
  return out;
}

Status CheckAllowRules(const NodePolicy& policy, const SandboxSpec& spec, const std::string& field) {
  if (spec.allow.size() > policy.max_allow_rules) {
    return Status::PermissionDenied(field + ": " + std::to_string(spec.allow.size()) +
                                    " rules, above this node's maximum of " + std::to_string(policy.max_allow_rules) +
                                    " per sandbox");
  }
  if (policy.allow_host_egress || spec.allow.empty()) return Status::Ok();
  const auto host = HostLocalAddresses();
  for (size_t i = 0; i < spec.allow.size(); ++i) {
    for (const auto& [family, address] : host) {
      if (!Covers(spec.allow[i], family, address.data())) continue;
      char text[INET6_ADDRSTRLEN] = {};
      ::inet_ntop(family, address.data(), text, sizeof(text));
      return Status::PermissionDenied(field + "[" + std::to_string(i) + "]: " + spec.allow[i].text +
                                      " reaches " + text + ", an address of this node (host-local services); "
                                      "this node allows no egress to itself");
    }
  }
  return Status::Ok();
}

template <typename T>
Status ApplyLimit(T* value, T fallback, T max, const std::string& field, const std::string& text,
                  const std::string& max_text) {
  if (*value == T{}) *value = fallback;
  if (*value > max) {
    return Status::PermissionDenied(field + ": " + text + " is above this node's maximum of " + max_text);
  }
  return Status::Ok();
}

std::string CpuText(double cpus) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", cpus);
  return text;
}

std::string MsText(std::chrono::milliseconds ms) {
  const int64_t n = ms.count();
  if (n != 0 && n % 3'600'000 == 0) return std::to_string(n / 3'600'000) + "h";
  if (n != 0 && n % 60'000 == 0) return std::to_string(n / 60'000) + "m";
  if (n != 0 && n % 1000 == 0) return std::to_string(n / 1000) + "s";
  return std::to_string(n) + "ms";
}

// A ttl of 0 means "for ever", which a node with a maximum never grants.
Status AdmitTtl(const NodeLimits& d, const NodeLimits& m, const std::string& field, std::chrono::milliseconds* ttl) {
  if (ttl->count() == 0) *ttl = d.ttl.count() != 0 ? d.ttl : m.ttl;
  if (m.ttl.count() != 0 && *ttl > m.ttl) {
    return Status::PermissionDenied(field + ": " + MsText(*ttl) + " is above this node's maximum of " + MsText(m.ttl));
  }
  return Status::Ok();
}

Status AdmitCpuset(const NodeLimits& d, const NodeLimits& m, const std::string& field, std::string* cpuset) {
  if (cpuset->empty()) *cpuset = d.cpuset.empty() ? m.cpuset : d.cpuset;
  if (m.cpuset.empty() || cpuset->empty()) return Status::Ok();
  Result<std::vector<int>> asked = ParseCpuList(*cpuset);
  if (!asked.ok()) return asked.status().Wrap(field);
  FR_ASSIGN_OR_RETURN(std::vector<int> allowed, ParseCpuList(m.cpuset));
  for (const int cpu : *asked) {
    if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
      return Status::PermissionDenied(field + ": " + *cpuset + " names CPU " + std::to_string(cpu) +
                                      ", outside this node's cpuset " + m.cpuset);
    }
  }
  return Status::Ok();
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Status CheckGrantedImage(const ClientGrant& grant, const std::string& image, const std::string& field) {
  if (grant.images.empty() || std::find(grant.images.begin(), grant.images.end(), image) != grant.images.end()) {
    return Status::Ok();
  }
  return Status::PermissionDenied(field + ": \"" + image + "\" is not among this token's images (" +
                                  JoinNames(grant.images) + ")");
}

// Each rw path (already resolved beneath the root, normal form) must be a
// granted workspace or inside one.
Status CheckGrantedWorkspaces(const ClientGrant& grant, const std::string& root, const SandboxSpec& spec,
                              const std::string& field) {
  if (grant.workspaces.empty()) return Status::Ok();
  for (size_t i = 0; i < spec.rw_paths.size(); ++i) {
    const std::string& path = spec.rw_paths[i];
    bool inside = false;
    for (const std::string& workspace : grant.workspaces) {
      const std::string dir = root + "/" + workspace;
      inside = inside || path == dir || path.starts_with(dir + "/");
    }
    if (!inside) {
      return Status::PermissionDenied(field + "[" + std::to_string(i) + "]: " + path +
                                      " is outside this token's workspaces (" + JoinNames(grant.workspaces) +
                                      " beneath " + root + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

ClientGrant GrantOf(const std::vector<std::string>& scopes) {
  ClientGrant grant;
  for (const std::string& scope : scopes) {
    if (scope.starts_with(kScopeImagePrefix)) grant.images.push_back(scope.substr(sizeof(kScopeImagePrefix) - 1));
    if (scope.starts_with(kScopeWorkspacePrefix)) {
      grant.workspaces.push_back(scope.substr(sizeof(kScopeWorkspacePrefix) - 1));
    }
  }
  return grant;
}

Status CheckGrantScope(const std::string& scope) {
  if (scope.starts_with(kScopeImagePrefix)) {
    const std::string name = scope.substr(sizeof(kScopeImagePrefix) - 1);
    if (name == "host" || name == "busybox") return Status::Ok();
    if (Status s = CheckImageName(name); !s.ok()) return s.Wrap("scope \"" + scope + "\"");
  }
  if (scope.starts_with(kScopeWorkspacePrefix)) {
    const std::string name = scope.substr(sizeof(kScopeWorkspacePrefix) - 1);
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return Status::InvalidArgument("scope \"" + scope +
                                     "\": a workspace is one directory name beneath the workspace root");
    }
  }
  return Status::Ok();
}

Result<SandboxSpec> AdmitSpec(const NodePolicy& policy, SpecRequest request, const std::string& path,
                              const ClientGrant& grant) {
  SandboxSpec spec = std::move(request.spec);
  FR_RETURN_IF_ERROR(CheckGrantedImage(grant, request.image, path + ".image"));
  FR_RETURN_IF_ERROR(ResolveImage(policy, request.image, path + ".image", &spec));
  FR_RETURN_IF_ERROR(ResolveSeccomp(policy, path + ".seccomp", &spec));
  FR_RETURN_IF_ERROR(ResolveRwPaths(policy, path + ".rw_paths", &spec));
  FR_RETURN_IF_ERROR(CheckGrantedWorkspaces(grant, policy.workspace_root, spec, path + ".rw_paths"));
  const NodeLimits& d = policy.defaults;
  const NodeLimits& m = policy.max;
  FR_RETURN_IF_ERROR(ApplyLimit(&spec.memory_bytes, d.memory_bytes, m.memory_bytes, path + ".memory",
                                ByteText(spec.memory_bytes), ByteText(m.memory_bytes)));
  FR_RETURN_IF_ERROR(ApplyLimit(&spec.pids, d.pids, m.pids, path + ".pids", std::to_string(spec.pids),
                                std::to_string(m.pids)));
  FR_RETURN_IF_ERROR(
      ApplyLimit(&spec.cpus, d.cpus, m.cpus, path + ".cpus", CpuText(spec.cpus), CpuText(m.cpus)));
  FR_RETURN_IF_ERROR(ApplyLimit(&spec.disk_bytes, d.disk_bytes, m.disk_bytes, path + ".disk",
                                ByteText(spec.disk_bytes), ByteText(m.disk_bytes)));
  FR_RETURN_IF_ERROR(AdmitTtl(d, m, path + ".ttl", &spec.ttl));
  FR_RETURN_IF_ERROR(AdmitCpuset(d, m, path + ".cpuset", &spec.cpuset));
  FR_RETURN_IF_ERROR(CheckAllowRules(policy, spec, path + ".allow"));
  if (Status s = ValidateSpec(spec); !s.ok()) return s.Wrap(path);
  return spec;
}

Result<ExecCall> AdmitExec(const NodePolicy& policy, const JsonView& body) {
  FR_ASSIGN_OR_RETURN(ExecCall call, ExecCallFromJson(body));
  const ExecLimits& limits = policy.exec;
  // A default is never above its maximum, however the policy was built.
  if (call.timeout.count() == 0) call.timeout = std::min(limits.default_timeout, limits.max_timeout);
  if (call.timeout > limits.max_timeout) {
    return Status::PermissionDenied(body.path() + ".timeout: " + MsText(call.timeout) +
                                    " is above this node's maximum of " + MsText(limits.max_timeout));
  }
  const bool output_given = body.Has("max_output_bytes") && call.max_output_bytes != 0;
  if (!output_given) call.max_output_bytes = std::min(limits.default_output_bytes, limits.max_output_bytes);
  if (call.max_output_bytes > limits.max_output_bytes) {
    return Status::PermissionDenied(body.path() + ".max_output_bytes: " + ByteText(call.max_output_bytes) +
                                    " is above this node's maximum of " + ByteText(limits.max_output_bytes));
  }
  return call;
}

}  // namespace flashroll::sandbox::api
