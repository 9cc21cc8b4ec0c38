// NodePolicy: what the node API (`flashroll sandboxd`) lets a create request
// ask for. The API is reachable over the network, so a request names things
// the node's administrator set up and never reaches host paths of its own:
//
//   image    a built-in (host, busybox) or a name in `images` (trees in the
//            image store, image_store.h); anything with a '/' or an unknown
//            name is refused. A stored OCI image's config User and
//            WorkingDir are the spec's user, group and workdir where the
//            request names none.
//   rw_paths paths strictly beneath `workspace_root` as written (its
//            canonical path), opened once without leaving it (no `..` out,
//            no symlink anywhere on the way, and nothing outside is looked
//            at); the descriptor is what gets bound (held_path.h), at the
//            path as asked with its `.` and `..` resolved; without a
//            workspace root none are allowed. With workspace disks (the
//            sandboxd default) the path must lie in one, workspace NAME
//            being <root>/NAME made by POST /v1/workspaces, and the held
//            inode must be on its filesystem: what a sandbox writes there
//            is bounded by the workspace's size (workspace_disks.h).
//   seccomp  "default" (the built-in filter) or a name in `seccomp_profiles`.
//   limits   memory, pids, cpus, disk and ttl: a limit the request leaves
//            out (or gives as 0) gets `defaults`; one above `max` is
//            refused; a cpuset must lie within max's (NodeLimits).
//   exec     each exec's timeout and output cap likewise (ExecLimits).
//   allow    at most max_allow_rules egress rules, none reaching the host
//            itself unless allow_host_egress.
//
// A default-constructed NodePolicy is the bare `flashroll sandboxd
// --listen ... --token-file F`: built-in images only, no rw_paths, the
// default seccomp filter, the limits below.
//
// Thread safety: a NodePolicy is a value; AdmitSpec only reads it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/api/wire.h"
#include "sandbox/spec.h"
#include "sandbox/workspace_disks.h"

namespace flashroll::sandbox::api {

struct NodeLimits {
  uint64_t memory_bytes = 0;
  int64_t pids = 0;
  double cpus = 0;
  uint64_t disk_bytes = 0;  // the writable layer's size
  // How long a sandbox lives (its ttl). A request without one (or 0, "for
  // ever") gets the default, else the maximum; 0 as the maximum: none.
  std::chrono::milliseconds ttl{0};
  // The CPUs a sandbox may be pinned to ("0-3,6"): a request's cpuset must
  // be within the maximum, and one without gets the default, else the
  // maximum; empty as the maximum: any CPU of the manager.
  std::string cpuset;
};

// What an exec may ask for. An exec the node lets run unbounded would hold
// an HTTP worker for ever: one without a timeout gets default_timeout. Its
// output comes back as JSON, where control bytes grow about 6x ("\u0001"),
// so a reply can be ~12x max_output_bytes (stdout and stderr).
struct ExecLimits {
  std::chrono::milliseconds default_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds max_timeout{std::chrono::hours(1)};
  size_t default_output_bytes = size_t{16} << 20;
  size_t max_output_bytes = size_t{16} << 20;
};

// An image the node serves: its tree and what its execs default to.
struct NodeImage {
  std::string tree;         // absolute; the lower layer
  ImageDefaults defaults;   // StoredImageDefaults: an OCI image's User, WorkingDir
};

struct NodePolicy {
  // Image name -> the image.
  std::map<std::string, NodeImage> images;
  // Canonical (realpath) directory; empty: rw_paths are refused.
  std::string workspace_root;
  // The workspace disks beneath workspace_root; null: rw paths bind plain
  // directories, bounded only by the filesystem they are on.
  std::shared_ptr<WorkspaceDisks> workspace_disks;
  size_t max_workspaces = 64;
  // Profile name -> absolute profile file (sandbox/seccomp_profile.h).
  std::map<std::string, std::string> seccomp_profiles;
  // Enough for a shell, a compiler or a test run; a node that needs more
  // says so in its config.
  // A sandbox its client forgets lives an hour, and none outlives a day.
  NodeLimits defaults{uint64_t{512} << 20, 256, 1.0, uint64_t{1} << 30, std::chrono::hours(1), ""};
  NodeLimits max{uint64_t{4} << 30, 4096, 4.0, uint64_t{4} << 30, std::chrono::hours(24), ""};
  ExecLimits exec;
  // Egress allow rules: at most this many per sandbox (the network policy's
  // BPF map is shared by every sandbox of the node, so one request must not
  // fill it), and none covering one of this node's own addresses or the
  // link-local metadata address 169.254.169.254 (host-local services)
  // unless allow_host_egress.
  size_t max_allow_rules = 64;
  bool allow_host_egress = false;
};

// Scopes that confine one client's creates further than the node policy:
// "image:NAME" lets a token create only from the images it names (the
// built-ins included: "image:busybox"), "workspace:NAME" lets it bind only
// the directory NAME directly beneath the workspace root and paths inside
// it. A token with no scope of a kind is not confined in it.
inline constexpr char kScopeImagePrefix[] = "image:";
inline constexpr char kScopeWorkspacePrefix[] = "workspace:";

struct ClientGrant {
  std::vector<std::string> images;      // empty: every image the node serves
  std::vector<std::string> workspaces;  // empty: anywhere beneath the root
};

// The grant that a token's scopes make (other scopes are ignored).
ClientGrant GrantOf(const std::vector<std::string>& scopes);

// kInvalidArgument naming the scope when an image: or workspace: scope
// names no plain name (an image name as CheckImageName takes it; a
// workspace without '/', not "." or ".."); OK for every other scope.
Status CheckGrantScope(const std::string& scope);

// The spec `request` asks for under `policy`, validated (ValidateSpec).
// `path` names the body in messages ("body"). Errors: kPermissionDenied
// naming the field and the rule ("body.rw_paths[0]: /etc is not beneath
// the workspace root /srv/ws"; "...: has a symlink on the way";
// "body.memory: 8G is above this node's
// maximum of 4G", "body.cpuset: 0-7 names CPUs outside this node's cpuset
// 0-3"); kInvalidArgument for a relative rw path and for what
// ValidateSpec refuses; kNotFound for an rw path beneath the root that does
// not exist. Nothing is created either way. An image or rw path outside
// `grant` is kPermissionDenied naming the field and the token's scopes.
Result<SandboxSpec> AdmitSpec(const NodePolicy& policy, SpecRequest request, const std::string& path,
                              const ClientGrant& grant = {});

// The exec `body` asks for (ExecCallFromJson) under `policy.exec`: a
// timeout or max_output_bytes the body leaves out (or gives as 0) gets the
// default; one above the maximum is kPermissionDenied naming the field
// ("body.timeout: 2h is above this node's maximum of 1h"). Errors of
// ExecCallFromJson pass through.
Result<ExecCall> AdmitExec(const NodePolicy& policy, const JsonView& body);

}  // namespace flashroll::sandbox::api
