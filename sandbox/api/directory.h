// SandboxDirectory: the node API's public sandbox ids and the clients that
// own them (sandbox/api/server.h).
//
// A create gets a random public id, "sb-" and 32 hex digits (128 bits from
// getrandom), owned by the creating client (its credential's name); the
// Manager's own name (fr-<pid>-<start>-<n>, guessable) never leaves the
// node. Resolve answers kNotFound alike for an id that does not exist and
// for one another client owns, so a client learns nothing of the others'
// sandboxes. Idempotency keys are scoped to their client (another client's
// equal key is another key), and a key reused with a different spec is
// kAlreadyExists (409) rather than the first sandbox.
//
// With a Manager that keeps sandboxes (sandbox.h), each entry is also in its
// sandbox's kept record (the annotation: public id, owner, idempotency key,
// spec), so a sandboxd started after this one adopts them with their ids,
// owners and keys (AdoptOrphans).
//
// Entries of sandboxes the Manager no longer lists (destroyed, ended at
// their TTL, crashed) are dropped every 64 creates and on each List; until
// then their events stay readable and the Manager answers 404 for the rest.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox::api {

class SandboxDirectory {
 public:
  // `manager` must outlive the directory.
  explicit SandboxDirectory(Manager* manager) : manager_(manager) {}

  // Creates a sandbox owned by `client`, or, for a `key` the client used
  // before, returns that sandbox while it exists. `spec_digest` identifies
  // the request (the same key with another digest is kAlreadyExists). The
  // Manager's errors otherwise.
  Result<std::string> Create(const std::string& client, const SandboxSpec& spec, const std::string& spec_digest,
                             const std::string& key);

  // The Manager's id for `public_id` when `client` owns it, or any owner's
  // with `any_owner` (an admin's delete); kNotFound naming the public id
  // otherwise.
  Result<std::string> Resolve(const std::string& client, const std::string& public_id, bool any_owner = false);

  // Adopts the Manager's orphans (Manager::Orphans) under the public ids,
  // owners and keys they had; one whose annotation does not say them is
  // discarded. Returns how many were adopted; failures are logged.
  size_t AdoptOrphans();

  // (public id, owner) of `client`'s live sandboxes, or of every one.
  std::vector<std::pair<std::string, std::string>> List(const std::string& client, bool every_owner);

 private:
  struct Entry {
    std::string internal_id;
    std::string owner;
  };
  struct Key {
    std::string public_id;
    std::string spec_digest;
  };

  // Entries whose sandboxes the Manager no longer has. Needs mu_.
  void PruneLocked();
  void EraseLocked(const std::string& public_id);

  Manager* const manager_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;             // by public id; guarded by mu_
  std::map<std::string, std::string> by_internal_;  // internal -> public; guarded by mu_
  std::map<std::string, Key> keys_;                  // client '\n' key -> ...; guarded by mu_
  size_t creates_since_prune_ = 0;                   // guarded by mu_
};

// A fresh public id: "sb-" and 32 lowercase hex digits.
std::string NewPublicSandboxId();

}  // namespace flashroll::sandbox::api
