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
//            workspace root none are allowed.
//   seccomp  "default" (the built-in filter) or a name in `seccomp_profiles`.
//   limits   memory, pids, cpus and disk: a limit the request leaves out
//            (or gives as 0) gets `defaults`; one above `max` is refused.
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
#include <string>

#include "common/status.h"
#include "sandbox/api/wire.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox::api {

struct NodeLimits {
  uint64_t memory_bytes = 0;
  int64_t pids = 0;
  double cpus = 0;
  uint64_t disk_bytes = 0;  // the writable layer's size
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
  // Profile name -> absolute profile file (sandbox/seccomp_profile.h).
  std::map<std::string, std::string> seccomp_profiles;
  // Enough for a shell, a compiler or a test run; a node that needs more
  // says so in its config.
  NodeLimits defaults{uint64_t{512} << 20, 256, 1.0, uint64_t{1} << 30};
  NodeLimits max{uint64_t{4} << 30, 4096, 4.0, uint64_t{4} << 30};
  ExecLimits exec;
  // Egress allow rules: at most this many per sandbox (the network policy's
  // BPF map is shared by every sandbox of the node, so one request must not
  // fill it), and none covering one of this node's own addresses or the
  // link-local metadata address 169.254.169.254 (host-local services)
  // unless allow_host_egress.
  size_t max_allow_rules = 64;
  bool allow_host_egress = false;
};

// The spec `request` asks for under `policy`, validated (ValidateSpec).
// `path` names the body in messages ("body"). Errors: kPermissionDenied
// naming the field and the rule ("body.rw_paths[0]: /etc is not beneath
// the workspace root /srv/ws"; "...: has a symlink on the way";
// "body.memory: 8G is above this node's
// maximum of 4G"); kInvalidArgument for a relative rw path and for what
// ValidateSpec refuses; kNotFound for an rw path beneath the root that does
// not exist. Nothing is created either way.
Result<SandboxSpec> AdmitSpec(const NodePolicy& policy, SpecRequest request, const std::string& path);

// The exec `body` asks for (ExecCallFromJson) under `policy.exec`: a
// timeout or max_output_bytes the body leaves out (or gives as 0) gets the
// default; one above the maximum is kPermissionDenied naming the field
// ("body.timeout: 2h is above this node's maximum of 1h"). Errors of
// ExecCallFromJson pass through.
Result<ExecCall> AdmitExec(const NodePolicy& policy, const JsonView& body);

}  // namespace flashroll::sandbox::api
