#include "scheduler/trainer_api.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "scheduler/batch_format.h"
#include "scheduler/sample_scheduler.h"

namespace flashroll {
namespace {

constexpr double kMaxPollSeconds = 600;
constexpr double kDefaultPollSeconds = 30;

Status BadQuery(std::string_view name, const std::string& why) {
  return Status::InvalidArgument("query parameter " + std::string(name) + ": " + why);
}

// The value of query parameter `name` as a whole number, or `fallback` when absent.
Result<uint64_t> QueryCount(const HttpRequest& request, std::string_view name, uint64_t fallback) {
  std::optional<std::string> text = request.Query(name);
  if (!text) return fallback;
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (text->empty() || error != std::errc() || end != text->data() + text->size()) {
    return BadQuery(name, "expected a whole number, got \"" + *text + "\"");
  }
  return value;
}

struct PollRequest {
  size_t min_groups = 1;
  size_t max_groups = 1;
  std::chrono::milliseconds timeout{0};
  bool binary = false;
  std::optional<int64_t> trainer_version;
};

Result<PollRequest> ParsePollRequest(const HttpRequest& request) {
  // A misspelt parameter silently taking its default would be a puzzle.
  for (const auto& [name, value] : request.query) {
    if (name != "min_groups" && name != "max_groups" && name != "timeout" && name != "format" &&
        name != "trainer_version") {
      return BadQuery(name, "unknown (known: min_groups, max_groups, timeout, format, trainer_version)");
    }
  }
  PollRequest poll;
  FR_ASSIGN_OR_RETURN(uint64_t min_groups, QueryCount(request, "min_groups", 1));
  FR_ASSIGN_OR_RETURN(uint64_t max_groups, QueryCount(request, "max_groups", min_groups));
  if (min_groups < 1) return BadQuery("min_groups", "must be at least 1, got 0");
  if (min_groups > max_groups) {
    return BadQuery("min_groups", std::to_string(min_groups) + " is more than max_groups " +
                                      std::to_string(max_groups));
  }
  poll.min_groups = min_groups;
  poll.max_groups = max_groups;

  double seconds = kDefaultPollSeconds;
  if (std::optional<std::string> text = request.Query("timeout")) {
    auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), seconds);
    // The negated range test also rejects NaN.
    if (text->empty() || error != std::errc() || end != text->data() + text->size() ||
        !(seconds >= 0 && seconds <= kMaxPollSeconds)) {
      return BadQuery("timeout", "expected seconds between 0 and 600, got \"" + *text + "\"");
    }
  }
  poll.timeout = std::chrono::milliseconds(std::llround(seconds * 1000));

  const std::string format = request.Query("format").value_or("json");
  if (format != "json" && format != "binary") {
    return BadQuery("format", "expected \"json\" or \"binary\", got \"" + format + "\"");
  }
  poll.binary = format == "binary";
  if (request.Query("trainer_version")) {
    FR_ASSIGN_OR_RETURN(uint64_t version, QueryCount(request, "trainer_version", 0));
    if (version > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return BadQuery("trainer_version", "more than a weight version can be: " + std::to_string(version));
    }
    poll.trainer_version = static_cast<int64_t>(version);
  }
  return poll;
}

// The lease's loss masks and-ed with the staleness bound against the
// version that will train them.
void MaskStaleTokens(BatchLease& lease, int64_t trainer_version, int64_t max_staleness) {
  for (TrainingGroup& group : lease.groups) {
    for (TrainingSample& sample : group.samples) {
      const std::vector<uint8_t> fresh = SampleScheduler::LossMask(sample.versions, trainer_version, max_staleness);
      for (size_t i = 0; i < fresh.size(); ++i) sample.loss_mask[i] &= fresh[i];
    }
  }
}

}  // namespace

TrainerApi::TrainerApi(BatchQueue* queue, TrainerApiOptions options)
    : queue_(queue),
      on_weights_(std::move(options.on_weights)),
      status_(std::move(options.status)),
      on_trained_(std::move(options.on_trained)),
      max_staleness_(options.max_staleness),
      published_version_(options.initial_version),
      published_path_(std::move(options.initial_path)),
      refuse_at_or_below_(options.refuse_at_or_below),
      server_(std::move(options.http)) {}

TrainerApi::~TrainerApi() { Stop(); }

Result<std::unique_ptr<TrainerApi>> TrainerApi::Start(BatchQueue* queue,
                                                      TrainerApiOptions options) {
  // Leases and weights must not be open to anyone who can reach the port.
  if (options.http.bearer_token.empty()) {
    return Status::InvalidArgument("trainer api: http.bearer_token is empty; it is required");
  }
  if (!options.on_weights) return Status::InvalidArgument("trainer api: on_weights is not set");
  if (!options.status) return Status::InvalidArgument("trainer api: status is not set");

  std::unique_ptr<TrainerApi> api(new TrainerApi(queue, std::move(options)));
  TrainerApi* self = api.get();
  HttpServer& server = api->server_;
  server.HandleRaw(HttpMethod::kGet, "/v1/batches",
                   [self](const HttpRequest& r) { return self->GetBatches(r); });
  server.HandleJson(HttpMethod::kPost, "/v1/batches/:lease/ack",
                    [self](const HttpRequest& r) { return self->AckBatch(r); });
  server.HandleJson(HttpMethod::kPost, "/v1/batches/:lease/renew",
                    [self](const HttpRequest& r) -> Result<Json> {
                      const std::string& lease = r.Param("lease");
                      FR_ASSIGN_OR_RETURN(auto expires_at, self->queue_->Renew(lease));
                      return Json{{"lease", lease}, {"expires_at_ms", std::chrono::duration_cast<std::chrono::milliseconds>(expires_at.time_since_epoch()).count()}};
                    });
  server.HandleJson(HttpMethod::kPost, "/v1/batches/:lease/release",
                    [self](const HttpRequest& r) -> Result<Json> {
                      const std::string& lease = r.Param("lease");
                      FR_RETURN_IF_ERROR(self->queue_->Release(lease));
                      return Json{{"lease", lease}};
                    });
  server.HandleJson(HttpMethod::kPost, "/v1/weights",
                    [self](const HttpRequest& r) { return self->PostWeights(r); });
  server.HandleJson(HttpMethod::kGet, "/v1/weights", [self](const HttpRequest&) { return self->GetWeights(); });
  server.HandleJson(HttpMethod::kGet, "/v1/status",
                    [self](const HttpRequest&) -> Result<Json> { return self->status_(); });
  FR_RETURN_IF_ERROR(server.Start());
  return api;
}

void TrainerApi::Stop() {
  stopping_.store(true);
  server_.Stop();
}

Result<HttpResponse> TrainerApi::GetBatches(const HttpRequest& request) {
  FR_ASSIGN_OR_RETURN(PollRequest poll, ParsePollRequest(request));
  const auto deadline = std::chrono::steady_clock::now() + poll.timeout;
  // The wait is cut into slices so that Stop(), which waits for requests in
  // flight, is not held up by a poll that may last ten minutes.
  while (true) {
    // The trainer sees this 503, or the connection Stop() closes.
    if (stopping_.load()) return Status::Unavailable("trainer api is stopping");
    // Rounded up, so that the slices add up to no less than the timeout.
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto slice = std::clamp(left, std::chrono::milliseconds(0), kStopCheckInterval);
    FR_ASSIGN_OR_RETURN(BatchLease lease, queue_->Lease(poll.min_groups, poll.max_groups, slice));
    if (!lease.id.empty()) {
      int64_t version = 0;
      if (poll.trainer_version) {
        version = *poll.trainer_version;
      } else {
        std::lock_guard<std::mutex> lock(ack_mu_);
        version = published_version_;
      }
      if (max_staleness_ >= 0) MaskStaleTokens(lease, version, max_staleness_);
      RememberServed(lease, version);
      HttpResponse reply;
      if (poll.binary) {
        reply.body = EncodeBatchBinary(lease);
      } else {
        reply.content_type = "application/json";
        reply.body = DumpJson(BatchToJson(lease));
      }
      return reply;
    }
    if (left <= slice) break;
  }
  HttpResponse timed_out;
  timed_out.status = 204;
  return timed_out;
}

void TrainerApi::RememberServed(const BatchLease& lease, int64_t version) {
  ServedLease served{version, {}};
  for (const TrainingGroup& group : lease.groups) {
    for (const TrainingSample& sample : group.samples) served.sample_ids.push_back(sample.sample_id);
  }
  std::lock_guard<std::mutex> lock(served_mu_);
  served_[lease.id] = std::move(served);
  if (served_.size() - recorded_order_.size() <= sweep_at_) return;
  // The queue's lock is taken under served_mu_, never the other way round.
  size_t unrecorded = 0;
  for (auto it = served_.begin(); it != served_.end();) {
    if (it->second.recorded) {
      ++it;
    } else if (queue_->MayBeAcked(it->first)) {
      ++unrecorded;
      ++it;
    } else {
      it = served_.erase(it);
    }
  }
  sweep_at_ = std::max(kLeaseMemory, 2 * unrecorded);
}

void TrainerApi::MarkRecorded(const std::string& lease) {
  std::lock_guard<std::mutex> lock(served_mu_);
  auto it = served_.find(lease);
  if (it == served_.end() || it->second.recorded) return;
  it->second.recorded = true;
  it->second.sample_ids.clear();
  recorded_order_.push_back(lease);
  while (recorded_order_.size() > kLeaseMemory) {
    served_.erase(recorded_order_.front());
    recorded_order_.pop_front();
  }
}

size_t TrainerApi::TEST_RememberedLeases() {
  std::lock_guard<std::mutex> lock(served_mu_);
  return served_.size();
}

Result<Json> TrainerApi::AckBatch(const HttpRequest& request) {
  const std::string& lease = request.Param("lease");
  const JsonView body = request.Body();
  std::optional<int64_t> trained_at, into;
  if (!body.value().is_null()) {
    FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"trained_at_version", "into_version"}));
    if (body.Has("trained_at_version")) {
      FR_ASSIGN_OR_RETURN(trained_at, body.GetInt("trained_at_version"));
    }
    if (body.Has("into_version")) {
      FR_ASSIGN_OR_RETURN(into, body.GetInt("into_version"));
    }
  }
  std::lock_guard<std::mutex> ack_lock(ack_mu_);
  std::optional<ServedLease> served;
  {
    std::lock_guard<std::mutex> lock(served_mu_);
    if (auto it = served_.find(lease); it != served_.end()) served = it->second;
  }
  // The trainer says which weights computed the loss; the mask served was
  // computed against the lease's version, so the two must agree for the
  // store to record the mask the step trained with.
  if (served && trained_at && *trained_at != served->version) {
    return Status::InvalidArgument("body.trained_at_version: " + std::to_string(*trained_at) +
                                   " is not the lease's trainer_version " + std::to_string(served->version) +
                                   " (its mask was computed against that): lease with the version you train with");
  }
  const int64_t at = served ? served->version : trained_at.value_or(published_version_);
  const int64_t into_version = into.value_or(at + 1);
  if (into_version <= at) {
    return Status::InvalidArgument("body.into_version: " + std::to_string(into_version) +
                                   " is not above the version that trained the batch, " + std::to_string(at));
  }
  FR_RETURN_IF_ERROR(queue_->Ack(lease, into_version));
  if (served && !served->recorded && on_trained_) {
    // Whatever failed (a busy store, a full disk), the ack was not recorded
    // and its retry may be: 503, which the trainer's client sends again.
    if (Status recorded = on_trained_(at, into_version, served->sample_ids); !recorded.ok()) {
      return Status::Unavailable("lease " + lease + ": the ack was not recorded (" + recorded.ToString() +
                                 "); send it again: acks are idempotent");
    }
  }
  // Kept, not erased: a retry is checked against this lease's version (not
  // the one published since) and records nothing twice.
  if (served) MarkRecorded(lease);
  return Json{{"lease", lease}};
}

Result<Json> TrainerApi::PostWeights(const HttpRequest& request) {
  const JsonView body = request.Body();
  FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"path", "version"}));
  FR_ASSIGN_OR_RETURN(std::string path, body.GetString("path"));
  FR_ASSIGN_OR_RETURN(int64_t version, body.GetInt("version"));
  if (path.empty()) return Status::InvalidArgument("body.path: empty");
  if (version < 0) {
    return Status::InvalidArgument("body.version: must be at least 0, got " +
                                   std::to_string(version));
  }
  const std::string what = "weights version " + std::to_string(version) + " at " + path;
  std::lock_guard<std::mutex> lock(ack_mu_);
  if (version <= refuse_at_or_below_) {
    return Status::FailedPrecondition(what + ": written before the trainer last started (checkpoints up to version " +
                                      std::to_string(refuse_at_or_below_) +
                                      " were on disk then); the groups its step trained are served again");
  }
  FR_RETURN_IF_ERROR(on_weights_(path, version).Wrap(what));
  if (version > published_version_) {
    published_version_ = version;
    published_path_ = path;
  }
  queue_->Durable(version);
  return Json{{"path", path}, {"version", version}};
}

Result<Json> TrainerApi::GetWeights() {
  std::lock_guard<std::mutex> lock(ack_mu_);
  return Json{{"version", published_version_},
              {"path", published_path_.empty() ? Json(nullptr) : Json(published_path_)},
              {"next_version", std::max(published_version_, refuse_at_or_below_) + 1}};
}

ReturnedGroups TrainerApi::ReturnUndurable(int64_t on_disk) {
  std::lock_guard<std::mutex> lock(ack_mu_);
  refuse_at_or_below_ = std::max(refuse_at_or_below_, on_disk);
  ReturnedGroups returned;
  returned.durable_version = published_version_;
  returned.released_leases = queue_->ReleaseAll();
  returned.groups = queue_->ReturnUndurable(published_version_);
  return returned;
}

}  // namespace flashroll
