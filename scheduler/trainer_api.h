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
//   POST /v1/batches/{lease}/ack  -> 200 {"lease": id}; 409 expired; 404 unknown.
//        The first 200 of a lease calls on_trained with the version its
//        mask was computed against and the samples it served.
//   POST /v1/weights {"path": string, "version": int >= 0}
//        -> 200 {"path", "version"} once on_weights accepted them; its error
//        Status otherwise (HttpStatusFromCode); 400 naming a missing,
//        mistyped or unknown field
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
// `version` (the lease's trainer_version).
using TrainedCallback = std::function<void(int64_t version, const std::vector<int64_t>& sample_ids)>;

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

  int port() const { return server_.port(); }
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
  // Live leases' trainer_version and samples, for on_trained; the oldest are
  // forgotten past kLeaseMemory (an expired lease is never acknowledged).
  struct ServedLease {
    int64_t version = 0;
    std::vector<int64_t> sample_ids;
  };
  static constexpr size_t kLeaseMemory = 4096;
  std::mutex served_mu_;
  std::map<std::string, ServedLease> served_;  // guarded by served_mu_
  std::deque<std::string> served_order_;       // oldest first; guarded by served_mu_
  // The highest version accepted by POST /v1/weights (initial_version before).
  std::atomic<int64_t> published_version_;
  std::atomic<bool> stopping_{false};
  HttpServer server_;
};

}  // namespace flashroll
