// Export: a job's samples as JSON Lines, one object per finished sample with
// what a trainer or an analysis needs (sample_id, task_id, group_id, effort,
// token_ids, logprobs, versions, loss_mask, reward, reward_parts, advantage,
// status, error), read from the store exactly as TrainingGroups are built.
//
// Thread safety: plain function; the Database is used by one thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "common/sqlite.h"
#include "common/status.h"

namespace flashroll {

// Finds a job by name or numeric id. kNotFound naming it.
Result<int64_t> FindJob(sqlite::Database& db, const std::string& name_or_id);

// Writes every completed or failed sample of `job_id`, by id. Returns the
// number written.
Result<int64_t> ExportJsonl(sqlite::Database& db, int64_t job_id, std::ostream& out);

}  // namespace flashroll
