#include "scheduler/trainer_api.h"

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/batch_format.h"
#include "tests/scheduler/training_group_util.h"

namespace flashroll {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using scheduler_test::ExpectSameGroup;
using scheduler_test::FakeClock;
using scheduler_test::GroupIds;
using scheduler_test::MakeGroup;
using Ids = std::vector<int64_t>;

constexpr char kToken[] = "trainer-s3cret";

class TrainerApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BatchQueueOptions queue_options;
    queue_options.lease_duration = seconds(10);
    queue_options.clock = clock_.AsFunction();
    queue_ = std::make_unique<BatchQueue>(queue_options);

    Result<std::unique_ptr<TrainerApi>> api = TrainerApi::Start(queue_.get(), Options());
    ASSERT_TRUE(api.ok()) << api.status().ToString();
    api_ = std::move(api).value();
    client_ = Client(kToken);
  }

  TrainerApiOptions Options() {
    TrainerApiOptions options;
    options.http.bearer_token = kToken;
    options.http.name = "trainer-api-test";
    options.on_weights = [this](const std::string& path, int64_t version) {
      std::lock_guard<std::mutex> lock(mu_);
      weights_.emplace_back(path, version);
      return weights_reply_;
    };
    options.status = [this] { return Json{{"step", 7}, {"queued", queue_->Stats().queued}}; };
    options.on_trained = [this](int64_t at, int64_t into, const std::vector<int64_t>& samples) {
      std::lock_guard<std::mutex> lock(mu_);
      trained_.push_back({at, into, static_cast<int64_t>(samples.size())});
      return trained_reply_;
    };
    return options;
  }

  HttpClient Client(const std::string& token) {
    HttpClientOptions options;
    options.base_url = api_->base_url();
    options.bearer_token = token;
    Result<HttpClient> client = HttpClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return std::move(client).value();
  }

  HttpResponse Get(const std::string& path) {
    Result<HttpResponse> reply = client_->Get(path);
    EXPECT_TRUE(reply.ok()) << path << ": " << reply.status().ToString();
    return reply.ok() ? *reply : HttpResponse{};
  }
  HttpResponse Post(const std::string& path, const std::string& body) {
    Result<HttpResponse> reply = client_->Post(path, body, "application/json");
    EXPECT_TRUE(reply.ok()) << path << ": " << reply.status().ToString();
    return reply.ok() ? *reply : HttpResponse{};
  }
  // The error reply's Status, as an HttpClient caller would see it.
  static Status ErrorOf(const HttpResponse& reply) {
    return StatusFromHttpReply(reply.status, reply.body);
  }
  // Leases through the API and returns the decoded batch.
  BatchLease LeaseOverHttp(const std::string& query = "timeout=0&max_groups=10") {
    HttpResponse reply = Get("/v1/batches?" + query);
    EXPECT_EQ(reply.status, 200) << reply.body;
    Result<Json> json = ParseJson(reply.body);
    if (!json.ok()) return {};
    Result<BatchLease> batch = BatchFromJson(*json);
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    return batch.ok() ? *batch : BatchLease{};
  }
  std::vector<std::pair<std::string, int64_t>> Weights() {
    std::lock_guard<std::mutex> lock(mu_);
    return weights_;
  }

  FakeClock clock_;
  std::unique_ptr<BatchQueue> queue_;
  std::unique_ptr<TrainerApi> api_;
  std::optional<HttpClient> client_;
  std::mutex mu_;
  std::vector<std::pair<std::string, int64_t>> weights_;  // guarded by mu_
  Status weights_reply_;                                  // guarded by mu_
  std::vector<Ids> trained_;                              // {at, into, samples} per on_trained; guarded by mu_
  Status trained_reply_;                                  // guarded by mu_
};

// An ack names the version that trained it and the one it goes into; the
// job records it at once (a failed record fails the ack, and its retry
// records it), and the queue holds the groups until a version at or above
// that one is published. When the trainer dies, the groups no published
// version holds are queued again, its live leases released, and a version
// it may have written refused.
TEST_F(TrainerApiTest, AnAckedGroupIsHeldUntilItsVersionIsPublishedAndReturnedWhenTheTrainerDies) {
  for (int64_t g : {1, 2, 3}) ASSERT_TRUE(queue_->Add(MakeGroup(g)).ok());
  const BatchLease a = LeaseOverHttp("timeout=0&max_groups=1&trainer_version=0");
  const std::string ack_a = "/v1/batches/" + a.id + "/ack";
  EXPECT_EQ(Post(ack_a, R"({"trained_at_version": 3})").status, 400) << "the lease's mask was computed at 0";
  EXPECT_EQ(Post(ack_a, R"({"into_version": 0})").status, 400);
  EXPECT_EQ(Post(ack_a, R"({"into": 2})").status, 400) << "an unknown field";
  {
    std::lock_guard<std::mutex> lock(mu_);
    trained_reply_ = Status::Unavailable("store busy");
  }
  EXPECT_EQ(Post(ack_a, R"({"trained_at_version": 0, "into_version": 2})").status, 503);
  {
    std::lock_guard<std::mutex> lock(mu_);
    trained_reply_ = Status::Ok();
  }
  EXPECT_EQ(Post(ack_a, R"({"trained_at_version": 0, "into_version": 2})").status, 200) << "the retry records it";
  EXPECT_EQ(Post(ack_a, "").status, 200) << "and a second retry records nothing";
  const BatchLease b = LeaseOverHttp("timeout=0&max_groups=1&trainer_version=0");
  EXPECT_EQ(Post("/v1/batches/" + b.id + "/ack", "").status, 200);  // into 0 + 1
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(trained_, (std::vector<Ids>{{0, 2, 2}, {0, 2, 2}, {0, 1, 2}}));
  }
  EXPECT_EQ(queue_->Stats().consumed, 2) << "the staleness gate moves at the ack";
  EXPECT_EQ(queue_->Stats().undurable, 2);
  EXPECT_EQ(Post("/v1/weights", R"({"path": "v1", "version": 1})").status, 200);
  EXPECT_EQ(queue_->Stats().undurable, 1) << "group 1 goes into version 2, not published yet";

  const BatchLease c = LeaseOverHttp("timeout=0&max_groups=1&trainer_version=1");
  EXPECT_EQ(GroupIds(c.groups), Ids{3});
  const ReturnedGroups returned = api_->ReturnUndurable(/*on_disk=*/2);
  EXPECT_EQ(returned.durable_version, 1);
  EXPECT_EQ(returned.groups, Ids{1});
  EXPECT_EQ(returned.released_leases, 1);
  EXPECT_EQ(queue_->Stats().consumed, 1);
  HttpResponse weights = Get("/v1/weights");
  EXPECT_EQ(weights.status, 200);
  EXPECT_EQ(*ParseJson(weights.body), (Json{{"version", 1}, {"path", "v1"}, {"next_version", 3}}));
  HttpResponse stale = Post("/v1/weights", R"({"path": "v2", "version": 2})");
  EXPECT_EQ(stale.status, 409) << "the dead trainer may have written version 2";
  EXPECT_NE(stale.body.find("written before the trainer last started"), std::string::npos) << stale.body;
  EXPECT_EQ(Post("/v1/weights", R"({"path": "v3", "version": 3})").status, 200);
  EXPECT_EQ(GroupIds(LeaseOverHttp("timeout=0&max_groups=10").groups), (Ids{1, 3})) << "in their first places";
}

// A retried ack is checked against its lease's version, not the version
// published since: the retry of a recorded ack is a 200 that records
// nothing (it was a 400 once version 1, its into_version, was published).
TEST_F(TrainerApiTest, ARetriedAckAfterItsVersionWasPublishedChangesNothing) {
  ASSERT_TRUE(queue_->Add(MakeGroup(1)).ok());
  const BatchLease a = LeaseOverHttp("timeout=0&max_groups=1&trainer_version=0");
  const std::string ack = "/v1/batches/" + a.id + "/ack";
  EXPECT_EQ(Post(ack, R"({"into_version": 1})").status, 200);
  EXPECT_EQ(Post("/v1/weights", R"({"path": "v1", "version": 1})").status, 200);
  const HttpResponse retry = Post(ack, R"({"into_version": 1})");
  EXPECT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(Post(ack, R"({"trained_at_version": 1})").status, 400) << "the lease was trained at 0";
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(trained_, (std::vector<Ids>{{0, 1, 2}}));
}

// An ack reaches on_trained however many leases were served after its own
// (the old API forgot a lease's samples after 4,096 newer leases and
// answered its ack 200 without recording it); the leases that can no longer
// be acked (expired here) are forgotten, so the memory stays bounded.
TEST_F(TrainerApiTest, AnAckRecordsItsLeaseAfterThousandsOfNewerLeases) {
  constexpr int64_t kNewer = 4200;  // more than the 4,096 leases the old API remembered
  for (int64_t g = 1; g <= kNewer + 2; ++g) ASSERT_TRUE(queue_->Add(MakeGroup(g)).ok());
  const BatchLease first = LeaseOverHttp("timeout=0&max_groups=1&trainer_version=0");
  for (int64_t i = 0; i < kNewer; ++i) {
    ASSERT_EQ(Get("/v1/batches?timeout=0&max_groups=1&trainer_version=0").status, 200) << "lease " << i;
  }
  const HttpResponse ack = Post("/v1/batches/" + first.id + "/ack", R"({"trained_at_version": 0, "into_version": 1})");
  EXPECT_EQ(ack.status, 200) << ack.body;
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(trained_, (std::vector<Ids>{{0, 1, 2}})) << "the ack of lease " << first.id << " was not recorded";
  }
  EXPECT_EQ(api_->TEST_RememberedLeases(), static_cast<size_t>(kNewer + 1));
  clock_.Advance(seconds(11));  // the newer leases expire unacked, their groups queued again
  size_t remembered = api_->TEST_RememberedLeases();
  for (int64_t i = 0; i < 2 * kNewer && remembered > static_cast<size_t>(kNewer); ++i) {
    ASSERT_EQ(Get("/v1/batches?timeout=0&max_groups=1&trainer_version=0").status, 200) << "lease " << i;
    remembered = api_->TEST_RememberedLeases();
  }
  EXPECT_LT(remembered, static_cast<size_t>(kNewer)) << "the expired leases are forgotten";
}

TEST_F(TrainerApiTest, EveryRouteRequiresTheToken) {
  ASSERT_TRUE(queue_->Add(MakeGroup(1)).ok());
  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    HttpClient other = Client(token);
    const std::vector<std::pair<HttpMethod, std::string>> routes = {
        {HttpMethod::kGet, "/v1/batches?timeout=0"},
        {HttpMethod::kPost, "/v1/batches/abc/ack"},
        {HttpMethod::kPost, "/v1/weights"},
        {HttpMethod::kGet, "/v1/status"}};
    for (const auto& [method, path] : routes) {
      std::string body = method == HttpMethod::kPost ? R"({"path": "/w", "version": 1})" : "";
      Result<HttpResponse> reply = other.Send(method, path, body, "application/json");
      ASSERT_TRUE(reply.ok()) << reply.status().ToString();
      EXPECT_EQ(reply->status, 401) << HttpMethodName(method) << " " << path << " token \""
                                    << token << "\"";
    }
  }
  EXPECT_TRUE(Weights().empty());
  EXPECT_EQ(queue_->Stats().queued, 1) << "nothing was leased";
}

TEST_F(TrainerApiTest, StartRefusesWithoutTokenOrCallbacks) {
  TrainerApiOptions options = Options();
  options.http.bearer_token.clear();
  Result<std::unique_ptr<TrainerApi>> api = TrainerApi::Start(queue_.get(), options);
  EXPECT_EQ(api.status().code(), Code::kInvalidArgument);
  EXPECT_NE(api.status().message().find("bearer_token"), std::string::npos);

  options = Options();
  options.on_weights = nullptr;
  api = TrainerApi::Start(queue_.get(), options);
  EXPECT_EQ(api.status().message(), "trainer api: on_weights is not set");

  options = Options();
  options.status = nullptr;
  api = TrainerApi::Start(queue_.get(), options);
  EXPECT_EQ(api.status().message(), "trainer api: status is not set");
}

TEST_F(TrainerApiTest, BadQueryValuesNameTheParameter) {
  ASSERT_TRUE(queue_->Add(MakeGroup(1)).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"min_groups=0", "min_groups: must be at least 1"},
      {"min_groups=3&max_groups=2", "min_groups: 3 is more than max_groups 2"},
      {"min_groups=two", "min_groups: expected a whole number, got \"two\""},
      {"min_groups=-1", "min_groups: expected a whole number"},
      {"max_groups=1x", "max_groups: expected a whole number"},
      {"min_groups=", "min_groups: expected a whole number"},
      {"timeout=-1", "timeout: expected seconds between 0 and 600, got \"-1\""},
      {"timeout=600.5", "timeout: expected seconds between 0 and 600"},
      {"timeout=nan", "timeout: expected seconds"},
      {"timeout=1s", "timeout: expected seconds"},
      {"timeout=", "timeout: expected seconds"},
      {"format=xml", "format: expected \"json\" or \"binary\", got \"xml\""},
      {"max_group=2", "max_group: unknown"},
      {"trainer_version=-1", "trainer_version: expected a whole number"},
      {"trainer_version=v3", "trainer_version: expected a whole number, got \"v3\""},
      {"trainer_version=4294967296", "trainer_version: more than a weight version can be"},
  };
  for (const auto& [query, message] : cases) {
    HttpResponse reply = Get("/v1/batches?" + query);
    EXPECT_EQ(reply.status, 400) << query;
    Status status = ErrorOf(reply);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << query;
    EXPECT_NE(status.message().find("query parameter " + message), std::string::npos)
        << query << ": " << status.message();
  }
  EXPECT_EQ(queue_->Stats().queued, 1) << "nothing was leased";
  EXPECT_EQ(Get("/v1/batches?timeout=600&min_groups=1").status, 200) << "the limits are allowed";
}

TEST_F(TrainerApiTest, JsonBatchCarriesEveryField) {
  ASSERT_TRUE(queue_->Add(MakeGroup(1, 3)).ok());
  HttpResponse reply = Get("/v1/batches?timeout=0");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.content_type.substr(0, 16), "application/json");
  Result<Json> json = ParseJson(reply.body);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ((*json)["lease"].get<std::string>().size(), 32u);
  EXPECT_EQ((*json)["expires_at_ms"], FakeClock::kStartMs + 10'000);
  const Json& sample = (*json)["groups"][0]["samples"][2];
  EXPECT_EQ(sample["tokens"], Json({1020, 1021, 1022, 1023, 1024}));
  EXPECT_EQ(sample["loss_mask"], Json({0, 0, 1, 1, 1}));
  EXPECT_EQ(sample["status"], "failed");
  Result<BatchLease> batch = BatchFromJson(*json);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->groups.size(), 1u);
  ExpectSameGroup(batch->groups[0], MakeGroup(1, 3));
}

TEST_F(TrainerApiTest, BinaryBatchDecodes) {
  for (int64_t id : {1, 2, 3}) ASSERT_TRUE(queue_->Add(MakeGroup(id, 2)).ok());
  HttpResponse reply = Get("/v1/batches?timeout=0&min_groups=2&max_groups=3&format=binary");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.content_type, "application/octet-stream");
  Result<BatchLease> batch = DecodeBatchBinary(reply.body);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->id.size(), 32u);
  EXPECT_EQ(batch->expires_at, clock_.AsFunction()() + seconds(10));
  ASSERT_EQ(GroupIds(batch->groups), (Ids{1, 2, 3}));
  for (size_t i = 0; i < 3; ++i) ExpectSameGroup(batch->groups[i], MakeGroup(int64_t(i) + 1, 2));
  EXPECT_TRUE(queue_->Ack(batch->id).ok()) << "the id in the metadata is the live lease";
}

TEST_F(TrainerApiTest, MaxGroupsDefaultsToMinGroups) {
  for (int64_t id : {1, 2, 3, 4}) ASSERT_TRUE(queue_->Add(MakeGroup(id)).ok());
  EXPECT_EQ(GroupIds(LeaseOverHttp("timeout=0").groups), (Ids{1}));
  EXPECT_EQ(GroupIds(LeaseOverHttp("timeout=0&min_groups=2").groups), (Ids{2, 3}));
}

TEST_F(TrainerApiTest, TimeoutAnswers204) {
  ASSERT_TRUE(queue_->Add(MakeGroup(1)).ok());
  const auto start = std::chrono::steady_clock::now();
  HttpResponse reply = Get("/v1/batches?timeout=0.3&min_groups=2");
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
  EXPECT_EQ(reply.status, 204);
  EXPECT_TRUE(reply.body.empty());
  EXPECT_EQ(queue_->Stats().queued, 1);
}

TEST_F(TrainerApiTest, LongPollWakesOnAdd) {
  const auto start = std::chrono::steady_clock::now();
  auto poll = std::async(std::launch::async, [&] { return LeaseOverHttp("timeout=30"); });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(queue_->Add(MakeGroup(5)).ok());
  EXPECT_EQ(GroupIds(poll.get().groups), (Ids{5}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
}

TEST_F(TrainerApiTest, ExactlyOnceAcrossAnExpiredLease) {
  for (int64_t id : {1, 2}) ASSERT_TRUE(queue_->Add(MakeGroup(id)).ok());
  BatchLease stalled = LeaseOverHttp();
  ASSERT_EQ(GroupIds(stalled.groups), (Ids{1, 2}));
  clock_.Advance(seconds(11));
  BatchLease retaken = LeaseOverHttp();
  EXPECT_EQ(GroupIds(retaken.groups), (Ids{1, 2}));

  HttpResponse late = Post("/v1/batches/" + stalled.id + "/ack", "");
  EXPECT_EQ(late.status, 409);
  EXPECT_EQ(ErrorOf(late).message(), "lease " + stalled.id +
                                         " expired at 2023-11-14T22:13:30.000Z; its groups were "
                                         "handed out again");
  HttpResponse ack = Post("/v1/batches/" + retaken.id + "/ack", "");
  EXPECT_EQ(ack.status, 200);
  EXPECT_EQ(ParseJson(ack.body).value(), Json({{"lease", retaken.id}}));
  EXPECT_EQ(Get("/v1/batches?timeout=0").status, 204) << "nothing is handed out a third time";
  EXPECT_EQ(queue_->Stats().consumed, 2);
}

// Renew and release over HTTP: a renewed lease survives its first expiry,
// a released one's groups go to the next poll at once.
TEST_F(TrainerApiTest, LeasesAreRenewedAndReleasedOverHttp) {
  for (int64_t id : {1, 2}) ASSERT_TRUE(queue_->Add(MakeGroup(id)).ok());
  BatchLease lease = LeaseOverHttp();
  clock_.Advance(seconds(8));
  HttpResponse renew = Post("/v1/batches/" + lease.id + "/renew", "");
  ASSERT_EQ(renew.status, 200) << renew.body;
  EXPECT_EQ(ParseJson(renew.body).value()["lease"], lease.id);
  EXPECT_GT(ParseJson(renew.body).value()["expires_at_ms"].get<int64_t>(),
            std::chrono::duration_cast<std::chrono::milliseconds>(lease.expires_at.time_since_epoch()).count());
  clock_.Advance(seconds(8));
  EXPECT_EQ(Get("/v1/batches?timeout=0").status, 204) << "still leased";
  HttpResponse release = Post("/v1/batches/" + lease.id + "/release", "");
  ASSERT_EQ(release.status, 200) << release.body;
  EXPECT_EQ(GroupIds(LeaseOverHttp().groups), (Ids{1, 2}));
  EXPECT_EQ(Post("/v1/batches/" + lease.id + "/ack", "").status, 409);
  EXPECT_EQ(Post("/v1/batches/" + lease.id + "/renew", "").status, 409);
  EXPECT_EQ(Post("/v1/batches/0123456789abcdef0123456789abcdef/release", "").status, 404);
}

// A group that waited on a straggler: its first sample was sampled by
// version 0 and finished when version 0 was current (mask 1 then), the
// straggler by version 3. Trained by version 3 with max_staleness 1, the
// first sample's tokens are too stale; the mask is the lease's, so a lease
// that expires and goes to a trainer at another version is masked anew.
TEST_F(TrainerApiTest, ALeaseMasksTokensPastTheStalenessBoundOfTheTrainersVersion) {
  api_.reset();
  TrainerApiOptions options = Options();
  options.max_staleness = 1;
  options.initial_version = 0;
  Result<std::unique_ptr<TrainerApi>> api = TrainerApi::Start(queue_.get(), options);
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  api_ = std::move(api).value();
  client_ = Client(kToken);

  TrainingGroup straggling = MakeGroup(1);
  for (size_t i = 0; i < straggling.samples.size(); ++i) {
    for (int32_t& v : straggling.samples[i].versions) {
      if (v >= 0) v = i == 0 ? 0 : 3;
    }
  }
  ASSERT_TRUE(queue_->Add(straggling).ok());
  const std::vector<uint8_t> sampled_kept = {0, 0, 1}, sampled_masked = {0, 0, 0};

  BatchLease at_3 = LeaseOverHttp("timeout=0&trainer_version=3");
  ASSERT_EQ(at_3.groups.size(), 1u);
  EXPECT_EQ(at_3.groups[0].samples[0].loss_mask, sampled_masked) << "3 - 0 > max_staleness 1";
  EXPECT_EQ(at_3.groups[0].samples[1].loss_mask, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(at_3.groups[0].samples[0].versions, straggling.samples[0].versions) << "versions are served as stored";

  // The lease expires; a trainer at version 1 gets the group with version
  // 0's tokens trained again.
  clock_.Advance(seconds(11));
  BatchLease at_1 = LeaseOverHttp("timeout=0&trainer_version=1");
  ASSERT_EQ(at_1.groups.size(), 1u);
  EXPECT_EQ(at_1.groups[0].samples[0].loss_mask, sampled_kept);

  // Without trainer_version the bound is against the last version posted
  // to /v1/weights: the trainer holds at least that one.
  clock_.Advance(seconds(11));
  ASSERT_EQ(Post("/v1/weights", R"({"path": "v2", "version": 2})").status, 200);
  BatchLease at_2 = LeaseOverHttp("timeout=0");
  ASSERT_EQ(at_2.groups.size(), 1u);
  EXPECT_EQ(at_2.groups[0].samples[0].loss_mask, sampled_masked) << "2 - 0 > max_staleness 1";
  EXPECT_EQ(at_2.groups[0].samples[1].loss_mask, (std::vector<uint8_t>{0, 0, 1, 1}));
}

TEST_F(TrainerApiTest, UnknownLeaseAckIs404) {
  HttpResponse reply = Post("/v1/batches/feedface/ack", "");
  EXPECT_EQ(reply.status, 404);
  EXPECT_NE(ErrorOf(reply).message().find("feedface"), std::string::npos);
}

TEST_F(TrainerApiTest, ClosedAndDrainedQueueIs409) {
  queue_->Close();
  HttpResponse reply = Get("/v1/batches?timeout=30");
  EXPECT_EQ(reply.status, 409);
  EXPECT_NE(ErrorOf(reply).message().find("closed"), std::string::npos);
}

TEST_F(TrainerApiTest, WeightsReachTheCallback) {
  HttpResponse reply = Post("/v1/weights", R"({"path": "/ckpt/step-3", "version": 3})");
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(ParseJson(reply.body).value(), Json({{"path", "/ckpt/step-3"}, {"version", 3}}));
  EXPECT_EQ(Weights(), (std::vector<std::pair<std::string, int64_t>>{{"/ckpt/step-3", 3}}));
}

TEST_F(TrainerApiTest, WeightsErrorsMapThroughHttpStatusFromCode) {
  const std::vector<Status> errors = {Status::FailedPrecondition("version 3 is older than 4"),
                                      Status::Unavailable("engine is swapping"),
                                      Status::NotFound("no such file"),
                                      Status::Internal("bug")};
  for (const Status& error : errors) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      weights_reply_ = error;
    }
    HttpResponse reply = Post("/v1/weights", R"({"path": "/ckpt/a", "version": 3})");
    EXPECT_EQ(reply.status, HttpStatusFromCode(error.code())) << error.ToString();
    Status seen = ErrorOf(reply);
    EXPECT_EQ(seen.code(), error.code());
    EXPECT_EQ(seen.message(), "weights version 3 at /ckpt/a: " + error.message());
  }
}

TEST_F(TrainerApiTest, WeightsBodyIsValidated) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "body: expected an object, got null"},
      {"[1]", "body: expected an object, got array"},
      {R"({"version": 3})", "body.path: missing"},
      {R"({"path": 3, "version": 3})", "body.path: expected a string"},
      {R"({"path": "/w"})", "body.version: missing"},
      {R"({"path": "/w", "version": "3"})", "body.version: expected"},
      {R"({"path": "/w", "version": 1.5})", "body.version:"},
      {R"({"path": "", "version": 3})", "body.path: empty"},
      {R"({"path": "/w", "version": -1})", "body.version: must be at least 0, got -1"},
      {R"({"path": "/w", "version": 3, "step": 9})", "body: unknown field \"step\""},
  };
  for (const auto& [body, message] : cases) {
    HttpResponse reply = Post("/v1/weights", body);
    EXPECT_EQ(reply.status, 400) << body;
    EXPECT_NE(ErrorOf(reply).message().find(message), std::string::npos)
        << body << ": " << ErrorOf(reply).message();
  }
  EXPECT_TRUE(Weights().empty());
}

TEST_F(TrainerApiTest, StatusIsTheCallbacksJson) {
  ASSERT_TRUE(queue_->Add(MakeGroup(1)).ok());
  Result<Json> status = client_->GetJson("/v1/status");
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(*status, Json({{"step", 7}, {"queued", 1}}));
}

TEST_F(TrainerApiTest, StopEndsLongPollsPromptly) {
  // HttpServer::Stop waits for requests in flight; a poll that sat out its
  // 20 s would hold it that long.
  auto poll = std::async(std::launch::async, [&] { return client_->Get("/v1/batches?timeout=20"); });
  std::this_thread::sleep_for(milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  api_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
  Result<HttpResponse> reply = poll.get();
  // A 503 if the handler answered before Stop closed the connection, the
  // closed connection otherwise: kUnavailable, "try again later", either way.
  Status seen = reply.ok() ? ErrorOf(*reply) : reply.status();
  EXPECT_EQ(seen.code(), Code::kUnavailable) << seen.ToString();
  ASSERT_TRUE(queue_->Add(MakeGroup(1)).ok());
  EXPECT_EQ(queue_->Stats().queued, 1) << "the cut poll leased nothing";
}

}  // namespace
}  // namespace flashroll
