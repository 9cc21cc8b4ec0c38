// What the RL job keeps in the store besides each sample's own writes
// (store::CompleteSample): its task list, the slots a resumed job already
// finished, and the record of what the trainer trained.
//
// Thread safety: plain functions; each Database is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/sqlite.h"
#include "common/status.h"
#include "scheduler/job_config.h"
#include "tasks/task.h"

namespace flashroll {

struct JobTask {
  int64_t store_id = 0;
  Task task;
};

// The job's tasks: generated and stored for a new job, read back for a
// resumed one (so it runs exactly what it started with).
Result<std::vector<JobTask>> PrepareTasks(sqlite::Database& db, int64_t job_id, const JobConfig& config,
                                          bool resumed);

// Per group, the slots that already finished (completed or failed). The
// attempts a stopped or killed job left queued, running or aborted are
// marked superseded first: their slots run again.
Result<std::map<int64_t, std::set<int>>> RecoverSlots(sqlite::Database& db, int64_t job_id);

// Records that `sample_ids` were trained by the weights of `version` once
// that update is durable: trained_at_version, and as each assistant turn's
// loss_mask the mask the lease served (the stored one and-ed with the
// staleness bound against `version`). Written once per sample.
Status RecordTrainedSamples(sqlite::Database& db, const std::vector<int64_t>& sample_ids, int64_t version,
                            int64_t max_staleness);

}  // namespace flashroll
