#include "scheduler/export.h"

#include <nlohmann/json.hpp>

#include "scheduler/trajectory.h"

namespace flashroll {

Result<int64_t> FindJob(sqlite::Database& db, const std::string& name_or_id) {
  FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                      db.Prepare("SELECT id FROM jobs WHERE name = ?1 OR CAST(id AS TEXT) = ?1"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, name_or_id));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::NotFound("no job named or numbered '" + name_or_id + "' in the store");
  return stmt.ColumnInt64(0);
}

Result<int64_t> ExportJsonl(sqlite::Database& db, int64_t job_id, std::ostream& out, bool all_attempts) {
  FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                      db.Prepare(all_attempts ? "SELECT id FROM samples WHERE job_id = ?1"
                                                " AND status IN ('completed', 'failed', 'superseded') ORDER BY id"
                                              : "SELECT id FROM samples WHERE job_id = ?1"
                                                " AND status IN ('completed', 'failed') ORDER BY id"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  std::vector<int64_t> ids;
  while (true) {
    FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    ids.push_back(stmt.ColumnInt64(0));
  }
  for (int64_t id : ids) {
    FR_ASSIGN_OR_RETURN(StoredSample s, LoadStoredSample(db, id));
    const TrainingSample& t = s.sample;
    nlohmann::json line = {{"sample_id", id},
                           {"task_id", s.task_id},
                           {"group_id", s.group_id},
                           {"slot", s.slot ? nlohmann::json(*s.slot) : nlohmann::json(nullptr)},
                           {"effort", s.effort},
                           {"token_ids", t.tokens},
                           {"logprobs", t.logprobs},
                           {"versions", t.versions},
                           {"loss_mask", t.loss_mask},
                           {"prompt_tokens", t.prompt_tokens},
                           {"reward", t.reward},
                           {"reward_parts", t.reward_parts},
                           {"advantage", s.advantage ? nlohmann::json(*s.advantage) : nlohmann::json(nullptr)},
                           {"reasoning_tokens", t.reasoning_tokens},
                           {"trained_at_version", s.trained_at_version ? nlohmann::json(*s.trained_at_version)
                                                                        : nlohmann::json(nullptr)},
                           {"status", t.status},
                           {"failure_kind", s.failure_kind.empty() ? nlohmann::json(nullptr)
                                                                   : nlohmann::json(s.failure_kind)}};
    if (!s.error.empty()) line["error"] = s.error;
    out << line.dump() << '\n';
    if (!out) return Status::IoError("export: write failed after sample " + std::to_string(id));
  }
  return static_cast<int64_t>(ids.size());
}

}  // namespace flashroll
