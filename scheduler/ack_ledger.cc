#include "scheduler/ack_ledger.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "scheduler/job_store.h"

namespace flashroll {

Result<std::unique_ptr<AckLedger>> AckLedger::Open(const std::string& store_path, int64_t job_id,
                                                   int64_t max_staleness) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Database> db, store::OpenStore(store_path));
  return std::unique_ptr<AckLedger>(new AckLedger(std::move(db), job_id, max_staleness));
}

Status AckLedger::Acked(int64_t at_version, int64_t into_version, const std::vector<int64_t>& sample_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  return store::RecordAcked(*db_, sample_ids, at_version, into_version);
}

Status AckLedger::Published(const std::string& path, int64_t version, const std::function<Status()>& accept) {
  const std::string what = "recording published version " + std::to_string(version);
  std::lock_guard<std::mutex> lock(mu_);
  FR_ASSIGN_OR_RETURN(sqlite::Transaction txn, sqlite::Transaction::Begin(*db_));
  if (Status s = store::RecordWeightVersion(*db_, job_id_, version, path); s.code() == Code::kAlreadyExists) {
    // Recorded and accepted together before: a retry of that publish
    // changes nothing; weights of the same version at another path are
    // other weights under a number already taken.
    FR_ASSIGN_OR_RETURN(std::optional<std::string> earlier, store::WeightVersionPath(*db_, job_id_, version));
    if (earlier == path) return Status::Ok();
    return Status::AlreadyExists("version " + std::to_string(version) + " was already published at " +
                                 earlier.value_or("?") + ", not at " + path + ": a version is published once");
  } else if (!s.ok()) {
    return s.Wrap(what);
  }
  FR_ASSIGN_OR_RETURN(std::vector<store::AckedSample> acked, store::AckedUpTo(*db_, job_id_, version));
  std::map<int64_t, std::vector<int64_t>> by_version;
  for (const store::AckedSample& sample : acked) by_version[sample.at_version].push_back(sample.sample_id);
  for (const auto& [at_version, ids] : by_version) {
    FR_RETURN_IF_ERROR(RecordTrainedSamples(*db_, ids, at_version, max_staleness_).Wrap(what));
  }
  // Inside the transaction: no sample with tokens of this version can be
  // committed before the version itself (its writer waits for this lock).
  FR_RETURN_IF_ERROR(accept());
  return txn.Commit().Wrap(what);
}

Result<std::vector<int64_t>> AckLedger::Forget(int64_t durable_version) {
  std::lock_guard<std::mutex> lock(mu_);
  return store::ForgetUndurableAcks(*db_, job_id_, durable_version);
}

Result<std::optional<store::PublishedVersion>> ResumePoint(sqlite::Database& db, int64_t job_id) {
  FR_ASSIGN_OR_RETURN(std::optional<store::PublishedVersion> latest, store::LatestWeightVersion(db, job_id));
  FR_RETURN_IF_ERROR(store::ForgetUndurableAcks(db, job_id, latest ? latest->version : 0).status());
  return latest;
}

Result<int64_t> HighestCheckpointOnDisk(const std::string& dir) {
  const auto unreadable = [&](const std::string& path, const std::error_code& ec) {
    return Status::IoError("checkpoint root " + dir + ": cannot read " + path + ": errno " +
                           std::to_string(ec.value()) + " (" + ec.message() + ")");
  };
  std::error_code ec;
  std::filesystem::directory_iterator entries(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return int64_t{-1};  // no trainer has written one yet
  int64_t highest = -1;
  for (; entries != std::filesystem::directory_iterator(); entries.increment(ec)) {
    const std::string name = entries->path().filename().string();
    if (name.size() < 2 || name.size() > 16 || name[0] != 'v') continue;
    if (name.find_first_not_of("0123456789", 1) != std::string::npos) continue;
    const bool is_dir = entries->is_directory(ec);
    if (ec) return unreadable(entries->path().string(), ec);
    if (is_dir) highest = std::max<int64_t>(highest, std::stoll(name.substr(1)));
  }
  // Opening or reading the root failed (the iterator is then at its end).
  if (ec) return unreadable(dir, ec);
  return highest;
}

}  // namespace flashroll
