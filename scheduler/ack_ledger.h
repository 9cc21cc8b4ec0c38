// AckLedger: the store's record of what the trainer trained, kept so that
// each group is trained exactly once into the weights across crashes of the
// job and of the trainer (docs/TRAINER_API.md, "Exactly once across
// crashes"; docs/STORE.md, samples.acked_*_version and trained_at_version).
//
//   ack of a lease at version T into version V  -> Acked: recorded at once
//   POST /v1/weights W                          -> Published: W recorded, and
//        every sample acked into a version <= W recorded trained, in one
//        transaction with the engine's acceptance of W
//   trainer restarted from the last published P -> Forget(P): the acks above
//        P are cleared (their groups are served again)
//   job resumed                                 -> ResumePoint: the last
//        published version, and the acks above it cleared
//
// Thread safety: all methods may be called from any thread (one connection,
// behind a mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/sqlite.h"
#include "common/status.h"
#include "common/store.h"

namespace flashroll {

class AckLedger {
 public:
  // Opens its own connection to the store at `store_path`.
  static Result<std::unique_ptr<AckLedger>> Open(const std::string& store_path, int64_t job_id,
                                                 int64_t max_staleness);

  // The trainer acknowledged `sample_ids`, trained at `at_version` into the
  // update it will publish as `into_version`.
  Status Acked(int64_t at_version, int64_t into_version, const std::vector<int64_t>& sample_ids);

  // The trainer published `version` at `path`: in one transaction, the
  // version is recorded, the samples acked into a version <= it are
  // recorded trained (trained_at_version and the mask the step trained
  // with), and `accept` (the engine's check and load) runs; an error from
  // `accept` rolls it all back and is returned. A version already recorded
  // at the same `path` is a retry: OK, and nothing runs again; at another
  // path, kAlreadyExists naming both paths.
  Status Published(const std::string& path, int64_t version, const std::function<Status()>& accept);

  // Clears the acks into a version above `durable_version`, which no
  // durable checkpoint holds. Returns their groups.
  Result<std::vector<int64_t>> Forget(int64_t durable_version);

 private:
  AckLedger(std::unique_ptr<sqlite::Database> db, int64_t job_id, int64_t max_staleness)
      : db_(std::move(db)), job_id_(job_id), max_staleness_(max_staleness) {}

  std::mutex mu_;
  std::unique_ptr<sqlite::Database> db_;  // guarded by mu_
  const int64_t job_id_;
  const int64_t max_staleness_;
};

// For a resumed job: its last published version (nullopt: none), after
// clearing every ack no published checkpoint holds.
Result<std::optional<store::PublishedVersion>> ResumePoint(sqlite::Database& db, int64_t job_id);

// The highest version of a v<digits> directory in `dir` (complete or not:
// a checkpoint a dead trainer wrote counts), or -1 for none (`dir` missing
// included). Fails closed: a `dir` that cannot be read (not a directory,
// no permission, ...) is a kIoError naming it and errno, never "none"
// (which would let a dead trainer's unpublished version be published).
Result<int64_t> HighestCheckpointOnDisk(const std::string& dir);

}  // namespace flashroll
