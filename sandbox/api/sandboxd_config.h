// SandboxdConfig: the typed configuration of the node agent, `flashroll
// sandboxd` (config kind `sandboxd`, e.g. configs/sandboxd.yaml). The bare
// command line (`--listen ... --token-file F`) fills the same struct.
//
//   kind: sandboxd
//   listen: 127.0.0.1:7070
//   image_store: /var/lib/flashroll/image-store   # image_store.h
//   images: [python]             # served besides the built-ins host, busybox
//   workspace_root: /srv/ws      # rw_paths only beneath it; absent: none
//   workspace_disks: true        # rw_paths only in workspace disks (workspace_disks.h)
//   workspace_images: DIR        # their images; default /var/lib/flashroll/workspaces/<root's hash>
//   max_workspaces: 64
//   seccomp_profiles: /etc/flashroll/seccomp   # NAME.json is profile NAME
//   limits: {default: {memory, pids, cpus, disk, ttl, cpuset}, max: {...}}
//   exec: {timeout: {default: 10m, max: 1h}, max_output: {default: 16M, max: 16M}}
//   egress: {max_rules: 64, allow_host: false}
//   tokens: [{name, file, scopes: [create, exec, files, admin, image:NAME, workspace:NAME]}]
//   tls: {cert: FILE, key: FILE}
//   warm_pool: 0, netns_pool: 8, allow_unenforced_limits: false
//   keep_sandboxes: false, orphan_timeout: 1h   # sandboxes outlive a restart
//
// ParseSandboxdConfig checks the file alone (what `flashroll config check`
// runs); the files and directories it names are read when the daemon
// starts, by LoadNodePolicy and LoadCredentials.
//
// Thread safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/http.h"
#include "common/status.h"
#include "sandbox/api/policy.h"
#include "sandbox/image_store.h"

namespace flashroll::sandbox::api {

struct SandboxdConfig {
  std::string listen = "127.0.0.1:7070";
  int64_t warm_pool = 0;
  int64_t netns_pool = 8;
  bool allow_unenforced_limits = false;
  // Sandboxes outlive sandboxd (stopped or killed) and the next one adopts
  // them; unadopted, they end after orphan_timeout (sandbox.h, kept.h).
  bool keep_sandboxes = false;
  std::chrono::milliseconds orphan_timeout{std::chrono::hours(1)};

  std::string image_store = kImageStoreDir;
  std::vector<std::string> images;  // names in image_store
  std::string workspace_root;       // empty: rw_paths refused
  bool workspace_disks = true;      // false: rw_paths bind plain directories
  std::string workspace_images;     // empty: WorkspaceImagesFor(workspace_root)
  int64_t max_workspaces = 64;
  std::string seccomp_profiles;     // a directory; empty: only "default"
  NodeLimits defaults = NodePolicy().defaults;
  NodeLimits max = NodePolicy().max;
  ExecLimits exec;
  size_t max_allow_rules = NodePolicy().max_allow_rules;
  bool allow_host_egress = false;

  struct Token {
    std::string name;
    std::string file;  // holds the token (LoadTokenFile)
    std::vector<std::string> scopes;
  };
  std::vector<Token> tokens;

  std::string tls_cert;  // both or neither
  std::string tls_key;
};

// Every scope the node API checks (server.h), for the bare command line's
// one token.
std::vector<std::string> AllScopes();

// The schema of `kind: sandboxd` files.
Schema SandboxdConfigSchema();

// Validates `file` against the schema and reads it, then checks what the
// schema cannot: plain image names, distinct token names, defaults within
// the maximums, absolute paths, TLS cert and key together. Errors read
// "path:line: key.path: what is wrong".
Result<SandboxdConfig> ParseSandboxdConfig(const ConfigFile& file);

// The node policy the config describes, from the file system: the images
// resolved in the store (kNotFound naming images[i] when one is missing),
// the workspace root made canonical (it must be a directory), the profiles
// NAME.json of the seccomp directory (each parsed and compiled, so a broken
// one stops the start, naming its file).
// With workspace disks, it mounts or adopts every workspace disk of the root
// (WorkspaceDisks::Open; that needs root).
Result<NodePolicy> LoadNodePolicy(const SandboxdConfig& config);

// Where a root's workspace images are kept by default: a directory of
// kWorkspaceImageDir named by the hash of the canonical root, so two nodes
// with different roots never share a name.
Result<std::string> WorkspaceImagesFor(const std::string& canonical_root);

// The tokens read from their files, as HTTP credentials. Errors name
// tokens[i].file; two entries with the same token are kInvalidArgument
// (their scopes would be ambiguous).
Result<std::vector<HttpCredential>> LoadCredentials(const SandboxdConfig& config);

// Listening anywhere but a loopback address (127.0.0.0/8, ::1, localhost)
// puts tokens and sandbox output on the network: that needs TLS, unless
// `insecure`. kInvalidArgument saying so.
Status CheckTransport(const SandboxdConfig& config, bool insecure);

}  // namespace flashroll::sandbox::api
