#include "sandbox/api/sandboxd_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>

#include "sandbox/api/server.h"
#include "sandbox/seccomp.h"
#include "common/sha256.h"

namespace flashroll::sandbox::api {

namespace {

Schema LimitsSchema() {
  return Schema::Map()
      .Optional("memory", Schema::ByteSize(4ull << 20))
      .Optional("pids", Schema::Int(1, 1'000'000))
      .Optional("cpus", Schema::Float(0.01, 4096))
      .Optional("disk", Schema::ByteSize(1ull << 20))
      .Optional("ttl", Schema::Duration(1))
      .Optional("cpuset", Schema::String());
}

// The node to point at: the key when the file has it, else its section,
// else the top level, so every error has a line.
YAML::Node Where(const YAML::Node& root, std::initializer_list<const char*> keys) {
  YAML::Node node = root;
  for (const char* key : keys) {
    if (!node.IsMap() || !node[key].IsDefined()) break;
    node = node[key];
  }
  return node;
}

NodeLimits ReadLimits(const YAML::Node& map, const NodeLimits& fallback) {
  if (!map.IsDefined() || !map.IsMap()) return fallback;
  return {ReadByteSize(map, "memory", fallback.memory_bytes), ReadInt(map, "pids", fallback.pids),
          ReadFloat(map, "cpus", fallback.cpus),     ReadByteSize(map, "disk", fallback.disk_bytes),
          ReadDuration(map, "ttl", fallback.ttl),     ReadString(map, "cpuset", fallback.cpuset)};
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4 {};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  std::string bare = host;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
  in6_addr v6 {};
  return ::inet_pton(AF_INET6, bare.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

// The profiles NAME.json of `dir`, compiled.
Result<std::map<std::string, std::string>> LoadSeccompProfiles(const std::string& dir) {
  std::map<std::string, std::string> profiles;
  std::error_code error;
  std::filesystem::directory_iterator entries(dir, error);
  if (error) return Status::FromErrno(error.value(), "seccomp_profiles: open " + dir);
  for (const auto& entry : entries) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= 5 || !file.ends_with(".json")) continue;
    const std::string name = file.substr(0, file.size() - 5);
    // "default" is always the built-in filter.
    if (name == "default") continue;
    const std::string path = dir + "/" + file;
    if (auto program = SeccompProgramFor(path); !program.ok()) return program.status().Wrap("seccomp_profiles");
    profiles[name] = path;
  }
  return profiles;
}

// Whether every CPU of `cpuset` is in `max` (both valid; empty `max`: any
// CPU, empty `cpuset`: max's).
bool CpusetWithin(const std::string& cpuset, const std::string& max) {
  if (max.empty() || cpuset.empty()) return true;
  const std::vector<int> asked = ParseCpuList(cpuset).value();
  const std::vector<int> allowed = ParseCpuList(max).value();
  return std::includes(allowed.begin(), allowed.end(), asked.begin(), asked.end());
}

}  // namespace

std::vector<std::string> AllScopes() { return {kScopeCreate, kScopeExec, kScopeFiles, kScopeAdmin}; }

Schema SandboxdConfigSchema() {
  return Schema::Map()
      .Required("kind", Schema::Enum({"sandboxd"}))
      .Optional("listen", Schema::String())
      .Optional("warm_pool", Schema::Int(0, 10'000))
      .Optional("netns_pool", Schema::Int(0, 10'000))
      .Optional("allow_unenforced_limits", Schema::Bool())
      .Optional("keep_sandboxes", Schema::Bool())
      .Optional("orphan_timeout", Schema::Duration(1))
      .Optional("image_store", Schema::String())
      .Optional("images", Schema::List(Schema::String()))
      .Optional("workspace_root", Schema::String())
      .Optional("workspace_disks", Schema::Bool())
      .Optional("workspace_images", Schema::String())
      .Optional("max_workspaces", Schema::Int(0, 10'000))
      .Optional("seccomp_profiles", Schema::String())
      .Optional("limits", Schema::Map().Optional("default", LimitsSchema()).Optional("max", LimitsSchema()))
      .Optional("egress", Schema::Map()
                              .Optional("max_rules", Schema::Int(0, 100'000))
                              .Optional("allow_host", Schema::Bool()))
      .Optional("exec", Schema::Map()
                            .Optional("timeout", Schema::Map()
                                                     .Optional("default", Schema::Duration(1))
                                                     .Optional("max", Schema::Duration(1)))
                            .Optional("max_output", Schema::Map()
                                                        .Optional("default", Schema::ByteSize(1))
                                                        .Optional("max", Schema::ByteSize(1, 1ull << 30))))
      .Required("tokens", Schema::List(Schema::Map()
                                           .Required("name", Schema::String())
                                           .Required("file", Schema::String())
                                           .Required("scopes", Schema::List(Schema::String(), 1)),
                                       1))
      .Optional("tls", Schema::Map().Required("cert", Schema::String()).Required("key", Schema::String()));
}

Result<SandboxdConfig> ParseSandboxdConfig(const ConfigFile& file) {
  const YAML::Node& root = file.root;
  FR_RETURN_IF_ERROR(SandboxdConfigSchema().Validate(root, file.path));
  SandboxdConfig c;
  c.listen = ReadString(root, "listen", c.listen);
  c.warm_pool = ReadInt(root, "warm_pool", c.warm_pool);
  c.netns_pool = ReadInt(root, "netns_pool", c.netns_pool);
  c.allow_unenforced_limits = ReadBool(root, "allow_unenforced_limits", c.allow_unenforced_limits);
  c.keep_sandboxes = ReadBool(root, "keep_sandboxes", c.keep_sandboxes);
  c.orphan_timeout = ReadDuration(root, "orphan_timeout", c.orphan_timeout);
  c.image_store = ReadString(root, "image_store", c.image_store);
  if (root["images"].IsDefined()) c.images = ReadStringList(root, "images");
  c.workspace_root = ReadString(root, "workspace_root", "");
  c.workspace_disks = ReadBool(root, "workspace_disks", c.workspace_disks);
  c.workspace_images = ReadString(root, "workspace_images", "");
  c.max_workspaces = ReadInt(root, "max_workspaces", c.max_workspaces);
  c.seccomp_profiles = ReadString(root, "seccomp_profiles", "");
  if (const YAML::Node limits = root["limits"]; limits.IsDefined()) {
    c.defaults = ReadLimits(limits["default"], c.defaults);
    c.max = ReadLimits(limits["max"], c.max);
  }
  if (const YAML::Node exec = root["exec"]; exec.IsDefined()) {
    ExecLimits& e = c.exec;
    if (const YAML::Node t = exec["timeout"]; t.IsDefined()) {
      e.default_timeout = ReadDuration(t, "default", e.default_timeout);
      e.max_timeout = ReadDuration(t, "max", e.max_timeout);
    }
    if (const YAML::Node o = exec["max_output"]; o.IsDefined()) {
      e.default_output_bytes = ReadByteSize(o, "default", e.default_output_bytes);
      e.max_output_bytes = ReadByteSize(o, "max", e.max_output_bytes);
    }
  }
  if (const YAML::Node egress = root["egress"]; egress.IsDefined()) {
    c.max_allow_rules = static_cast<size_t>(ReadInt(egress, "max_rules", static_cast<int64_t>(c.max_allow_rules)));
    c.allow_host_egress = ReadBool(egress, "allow_host", c.allow_host_egress);
  }
  const YAML::Node tokens = root["tokens"];
  for (const YAML::Node& t : tokens) {
    c.tokens.push_back({ReadString(t, "name", ""), ReadString(t, "file", ""), ReadStringList(t, "scopes")});
  }
  if (const YAML::Node tls = root["tls"]; tls.IsDefined()) {
    c.tls_cert = ReadString(tls, "cert", "");
    c.tls_key = ReadString(tls, "key", "");
  }

  // What the schema cannot express.
  for (const char* key : {"image_store", "workspace_root", "workspace_images", "seccomp_profiles"}) {
    const YAML::Node node = root[key];
    if (node.IsDefined() && node.Scalar().rfind('/', 0) != 0) {
      return file.ErrorAt(node, key, "must be an absolute path, got \"" + node.Scalar() + "\"");
    }
  }
  for (size_t i = 0; i < c.images.size(); ++i) {
    if (Status s = CheckImageName(c.images[i]); !s.ok()) {
      return file.ErrorAt(root["images"][i], "images[" + std::to_string(i) + "]", s.message());
    }
  }
  // A route scope, or a grant that confines creates (policy.h).
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    for (size_t k = 0; k < c.tokens[i].scopes.size(); ++k) {
      const std::string& scope = c.tokens[i].scopes[k];
      const std::vector<std::string> routes = AllScopes();
      const bool route = std::find(routes.begin(), routes.end(), scope) != routes.end();
      const bool granting = scope.starts_with(kScopeImagePrefix) || scope.starts_with(kScopeWorkspacePrefix);
      const std::string where = "tokens[" + std::to_string(i) + "].scopes[" + std::to_string(k) + "]";
      if (!route && !granting) {
        return file.ErrorAt(tokens[i]["scopes"][k], where,
                            "\"" + scope + "\" is not one of create, exec, files, admin, image:NAME, workspace:NAME");
      }
      if (Status s = CheckGrantScope(scope); !s.ok()) return file.ErrorAt(tokens[i]["scopes"][k], where, s.message());
    }
  }
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (c.tokens[j].name == c.tokens[i].name) {
        return file.ErrorAt(tokens[i]["name"], "tokens[" + std::to_string(i) + "].name",
                            "\"" + c.tokens[i].name + "\" is also tokens[" + std::to_string(j) + "]'s name");
      }
    }
  }
  for (const char* which : {"default", "max"}) {
    const std::string& cpuset = std::string(which) == "default" ? c.defaults.cpuset : c.max.cpuset;
    if (cpuset.empty()) continue;
    if (Status s = ParseCpuList(cpuset).status(); !s.ok()) {
      return file.ErrorAt(Where(root, {"limits", which, "cpuset"}), std::string("limits.") + which + ".cpuset",
                          s.message());
    }
  }
  // A default above its maximum would make every request without limits
  // a 403.
  const std::pair<const char*, bool> above[] = {
      {"memory", c.defaults.memory_bytes > c.max.memory_bytes},
      {"pids", c.defaults.pids > c.max.pids},
      {"cpus", c.defaults.cpus > c.max.cpus},
      {"disk", c.defaults.disk_bytes > c.max.disk_bytes},
      {"ttl", c.max.ttl.count() != 0 && c.defaults.ttl > c.max.ttl},
      {"cpuset", !CpusetWithin(c.defaults.cpuset, c.max.cpuset)}};
  for (const auto& [key, is_above] : above) {
    if (is_above) {
      return file.ErrorAt(Where(root, {"limits", "default", key}), std::string("limits.default.") + key,
                          std::string("is above limits.max.") + key + " (a built-in default where not given)");
    }
  }
  const std::pair<const char*, bool> exec_above[] = {
      {"timeout", c.exec.default_timeout > c.exec.max_timeout},
      {"max_output", c.exec.default_output_bytes > c.exec.max_output_bytes}};
  for (const auto& [key, is_above] : exec_above) {
    if (is_above) {
      return file.ErrorAt(Where(root, {"exec", key, "default"}), std::string("exec.") + key + ".default",
                          std::string("is above exec.") + key + ".max (a built-in default where not given)");
    }
  }
  return c;
}

Result<NodePolicy> LoadNodePolicy(const SandboxdConfig& config) {
  NodePolicy policy;
  policy.defaults = config.defaults;
  policy.max = config.max;
  policy.exec = config.exec;
  policy.max_allow_rules = config.max_allow_rules;
  policy.allow_host_egress = config.allow_host_egress;
  for (size_t i = 0; i < config.images.size(); ++i) {
    const std::string where = "images[" + std::to_string(i) + "]";
    auto tree = StoredImage(config.image_store, config.images[i]);
    if (!tree.ok()) return tree.status().Wrap(where);
    auto defaults = StoredImageDefaults(config.image_store, config.images[i]);
    if (!defaults.ok()) return defaults.status().Wrap(where);
    policy.images[config.images[i]] = {*tree, *defaults};
  }
  if (!config.workspace_root.empty()) {
    std::unique_ptr<char, decltype(&::free)> real(::realpath(config.workspace_root.c_str(), nullptr), &::free);
    if (real == nullptr) return Status::FromErrno(errno, "workspace_root: realpath " + config.workspace_root);
    struct stat st {};
    if (::stat(real.get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("workspace_root: " + config.workspace_root + " is not a directory");
    }
    policy.workspace_root = real.get();
    // Beneath "/" every host path but the root itself would be allowed.
    if (policy.workspace_root == "/") {
      return Status::InvalidArgument("workspace_root: " + config.workspace_root + " is the host's root");
    }
    if (config.workspace_disks) {
      std::string images = config.workspace_images;
      if (images.empty()) {
        FR_ASSIGN_OR_RETURN(images, WorkspaceImagesFor(policy.workspace_root));
      }
      auto disks = WorkspaceDisks::Open(policy.workspace_root, images);
      if (!disks.ok()) {
        return disks.status().Wrap("workspace_disks (sandboxd needs root for them; workspace_disks: false binds "
                                   "plain directories, unbounded)");
      }
      policy.workspace_disks = std::move(*disks);
    }
  }
  policy.max_workspaces = static_cast<size_t>(config.max_workspaces);
  if (!config.seccomp_profiles.empty()) {
    FR_ASSIGN_OR_RETURN(policy.seccomp_profiles, LoadSeccompProfiles(config.seccomp_profiles));
  }
  return policy;
}

Result<std::string> WorkspaceImagesFor(const std::string& canonical_root) {
  Sha256 hash;
  hash.Update(canonical_root.data(), canonical_root.size());
  FR_ASSIGN_OR_RETURN(std::string hex, hash.HexDigest());
  return std::string(kWorkspaceImageDir) + "/" + hex.substr(0, 16);
}

Result<std::vector<HttpCredential>> LoadCredentials(const SandboxdConfig& config) {
  std::vector<HttpCredential> credentials;
  for (size_t i = 0; i < config.tokens.size(); ++i) {
    const SandboxdConfig::Token& t = config.tokens[i];
    const std::string key = "tokens[" + std::to_string(i) + "].file";
    auto token = LoadTokenFile(t.file);
    if (!token.ok()) return token.status().Wrap(key);
    for (size_t j = 0; j < credentials.size(); ++j) {
      if (credentials[j].token == *token) {
        return Status::InvalidArgument(key + ": " + t.file + " holds the same token as tokens[" + std::to_string(j) +
                                       "].file");
      }
    }
    credentials.push_back({t.name, *token, t.scopes});
  }
  return credentials;
}

Status CheckTransport(const SandboxdConfig& config, bool insecure) {
  const size_t colon = config.listen.rfind(':');
  const std::string host = config.listen.substr(0, colon == std::string::npos ? config.listen.size() : colon);
  if (IsLoopback(host) || !config.tls_cert.empty() || insecure) return Status::Ok();
  return Status::InvalidArgument("listen " + config.listen +
                                 ": a non-loopback address needs tls (cert and key) in the config, or --insecure");
}

}  // namespace flashroll::sandbox::api
