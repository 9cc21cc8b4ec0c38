// Export: a job's samples as JSON Lines, one object per finished sample with
// what a trainer or an analysis needs (sample_id, task_id, group_id, slot,
// effort, token_ids, logprobs, versions, loss_mask, reward, reward_parts,
// advantage, trained_at_version, status, error), read from the store exactly
// as TrainingGroups are built. One line per (group, slot): the finished
// attempt; superseded attempts only with `all_attempts`. Once a sample was
// trained its loss_mask is the mask that step trained with, and
// trained_at_version the version whose weights computed that loss (null
// before).
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

// Writes every completed or failed sample of `job_id` (and superseded ones
// with `all_attempts`), by id. Returns the number written.
Result<int64_t> ExportJsonl(sqlite::Database& db, int64_t job_id, std::ostream& out, bool all_attempts = false);

}  // namespace flashroll
