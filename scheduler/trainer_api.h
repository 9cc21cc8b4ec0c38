// TrainerApi: the HTTP API through which a trainer takes the RL job's
// finished TrainingGroups (leased from a BatchQueue, acknowledged once
// consumed), hands new weights back to the job, and reads its status.
// docs/TRAINER_API.md is the client author's description.
//
//   GET  /v1/batches?min_groups=N&max_groups=M&timeout=S&format=json|binary
//                   &trainer_version=V
//        long poll: 200 with a lease (BatchToJson or EncodeBatchBinary), or
//        204 with no body once `timeout` seconds pass without min_groups
//        groups queued. Defaults: min_groups 1, max_groups = min_groups,
//        timeout 30, format json, trainer_version the highest version
//        posted to /v1/weights (or initial_version). With max_staleness >= 0
//        the served loss mask is the stored one and-ed with the staleness
//        bound against V: a token sampled by version v is trained only if
//        V - v <= max_staleness, V being the version whose weights will
//        compute its loss (so a group that waited on a straggler is masked
//        when it is trained, not when its samples finished). 400 naming the
//        parameter for min_groups < 1 or > max_groups, a timeout outside
//        [0, 600], an unknown format, a trainer_version that is not a whole
//        number or an unknown parameter; 409 once the queue is closed and
//        empty.
//   POST /v1/batches/{lease}/renew -> 200 {"lease", "expires_at_ms"}: a live
//        lease lasts lease_duration from now; 409 acknowledged, expired or
//        released; 404 unknown.
//   POST /v1/batches/{lease}/release -> 200 {"lease"}: its groups go back to
//        the queue now (again 200 once released or expired); 409 acknowledged.
//   POST /v1/batches/{lease}/ack  [{"trained_at_version": T, "into_version": V}]
//        -> 200 {"lease": id}; 409 expired or released; 404 unknown; 400 for
//        a T other than the lease's trainer_version (the version its mask
//        was computed against) or a V <= T. V, the version the step will
//        publish, defaults to T + 1. The first 200 of a lease calls
//        on_trained with T, V and the samples it served (until it succeeds:
//        its failure is a 503 naming the lease, and a retried ack calls it
//        again); the groups stay in the queue, consumed, until a version
//        >= V is published (BatchQueue::Durable) or ReturnUndurable. A
//        lease is remembered until its ack is recorded, however many are
//        served meanwhile, so an ack the queue takes always reaches
//        on_trained.
//   POST /v1/weights {"path": string, "version": int >= 0}
//        -> 200 {"path", "version"} once on_weights accepted them; its error
//        Status otherwise (HttpStatusFromCode); 400 naming a missing,
//        mistyped or unknown field; 409 for a version at or below the
//        checkpoints on disk when the trainer last (re)started (written by a
//        trainer since dead, whose acked groups were served again).
//        Whether a second POST of a version is a retry (same path: 200) or
//        a conflict (another path: 409) is on_weights' to say.
//   GET  /v1/weights -> 200 {"version", "path", "next_version"}: the last
//        published version (null path before any) and the lowest version
//        the trainer may publish next: above every version the engine has
//        served and every checkpoint on disk when it (re)started
//   GET  /v1/status -> 200 with the status callback's JSON
//
// Every route requires the bearer token: 401 without it or with another.
//
// Thread safety: the callbacks run on the HTTP server's worker threads,
// possibly several at once, so they must be thread-safe. Stop() may be
// called from any one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>
#include <functional>
#include <memory>
#include <string>

#include "common/http.h"
#include "common/json.h"
#include "common/status.h"
#include "scheduler/batch_queue.h"

namespace flashroll {

using WeightsCallback = std::function<Status(const std::string& path, int64_t version)>;
// A lease was acknowledged: its samples were trained by the weights of
// `at_version` (the lease's trainer_version) into the update that version
// `into_version` will publish.
using TrainedCallback =
    std::function<Status(int64_t at_version, int64_t into_version, const std::vector<int64_t>& sample_ids)>;

// What ReturnUndurable did.
struct ReturnedGroups {
  int64_t durable_version = 0;   // the last published version
  int64_t released_leases = 0;   // live leases given back
  std::vector<int64_t> groups;   // acked into a later version, queued again
};

struct TrainerApiOptions {
  // Where and how to serve; bearer_token must not be empty.
  HttpServerOptions http;
  // POST /v1/weights: the trainer saved weights `version` at `path`.
  WeightsCallback on_weights;
  // GET /v1/status: the job's status (queue counters, step, versions, ...).
  std::function<Json()> status;
  // Optional: called once per acknowledged lease.
  TrainedCallback on_trained;
  // The staleness bound a lease's loss mask is applied with (the job's
  // scheduler.max_staleness); negative: masks are served as stored.
  int64_t max_staleness = -1;
  // The version the trainer holds before it posts any weights (a resumed
  // job's last checkpoint), for a lease that does not name trainer_version.
  int64_t initial_version = 0;
  // Its checkpoint directory, relative to the checkpoint root ("" for the
  // initial model), for GET /v1/weights.
  std::string initial_path;
  // The highest checkpoint version on disk when the job started: a version
  // up to it is refused (a trainer of the previous job wrote it).
  int64_t refuse_at_or_below = -1;
};

class TrainerApi {
 public:
  // Serves `queue` (which must outlive the API) until Stop(). Errors:
  // kInvalidArgument for an empty bearer token or a missing callback
  // (naming it); HttpServer::Start's errors (e.g. the port is taken).
  static Result<std::unique_ptr<TrainerApi>> Start(BatchQueue* queue, TrainerApiOptions options);

  TrainerApi(const TrainerApi&) = delete;
  TrainerApi& operator=(const TrainerApi&) = delete;
  ~TrainerApi();

  // Stops serving. Like HttpServer::Stop it closes the connections it
  // serves and waits for the handlers in flight; a long poll notices within
  // kStopCheckInterval rather than holding Stop() for up to its timeout,
  // ends with a 503 or the closed connection, and leaves the queue as it was.
  void Stop();

  // The trainer died and is being started again (it resumes from the last
  // published checkpoint): its live leases are released, the groups acked
  // into a version not yet published are queued again, and a version up to
  // `on_disk` (the highest checkpoint it may have written) is refused.
  ReturnedGroups ReturnUndurable(int64_t on_disk);

  int port() const { return server_.port(); }

  // How many served leases are remembered now (tests of the memory bound).
  size_t TEST_RememberedLeases();
  std::string base_url() const { return server_.base_url(); }

  // How often a long poll looks up from the queue to see whether Stop() was
  // called.
  static constexpr std::chrono::milliseconds kStopCheckInterval{200};

 private:
  TrainerApi(BatchQueue* queue, TrainerApiOptions options);

  Result<HttpResponse> GetBatches(const HttpRequest& request);
  Result<Json> AckBatch(const HttpRequest& request);
  // Keeps what `lease` served and against which version, for its ack.
  void RememberServed(const BatchLease& lease, int64_t version);
  Result<Json> PostWeights(const HttpRequest& request);

  // Constant after construction.
  BatchQueue* const queue_;
  const WeightsCallback on_weights_;
  const std::function<Json()> status_;

  const TrainedCallback on_trained_;
  const int64_t max_staleness_;
  // Served leases' trainer_version and samples, for on_trained. A lease is
  // remembered until its ack is recorded (then as one of the last
  // kLeaseMemory recorded, for a retry's check) or until the queue can no
  // longer ack it (expired, released): an ack the queue takes always
  // finds its samples, however many leases were served since.
  struct ServedLease {
    int64_t version = 0;
    std::vector<int64_t> sample_ids;
    bool recorded = false;  // acked and reported to on_trained (its samples dropped)
  };
  static constexpr size_t kLeaseMemory = 4096;
  // Marks `lease` recorded and forgets the oldest recorded past kLeaseMemory.
  void MarkRecorded(const std::string& lease);
  std::mutex served_mu_;
  std::map<std::string, ServedLease> served_;  // guarded by served_mu_
  std::deque<std::string> recorded_order_;     // recorded leases, oldest first; guarded by served_mu_
  // Unrecorded leases past which RememberServed forgets those the queue can
  // no longer ack (doubled with what is left, so the sweeps cost O(1) a
  // lease); guarded by served_mu_.
  size_t sweep_at_ = kLeaseMemory;
  Result<Json> GetWeights();

  // Serialises acks, publishes and ReturnUndurable: what a publish makes
  // durable is exactly what was acked before it.
  std::mutex ack_mu_;
  // The highest version accepted by POST /v1/weights (initial_version
  // before) and its path; guarded by ack_mu_.
  int64_t published_version_;
  std::string published_path_;
  int64_t refuse_at_or_below_;  // guarded by ack_mu_
  std::atomic<bool> stopping_{false};
  HttpServer server_;
};

}  // namespace flashroll
