#include "scheduler/job_store.h"

#include "common/store.h"
#include "scheduler/sample_scheduler.h"
#include "tasks/instance.h"
#include "tasks/task_file.h"
#include "tasks/task_record.h"

namespace flashroll {

// The job's tasks: generated and stored for a new job, read back for a
// resumed one (so it runs exactly what it started with).
Result<std::vector<JobTask>> PrepareTasks(sqlite::Database& db, int64_t job_id, const JobConfig& config,
                                          bool resumed) {
  std::vector<JobTask> tasks;
  if (resumed) {
    FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                        db.Prepare("SELECT id, family, source_key, problem_json, verifier_json FROM tasks"
                                   " WHERE job_id = ?1 ORDER BY id"));
    FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
    while (true) {
      FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      FR_ASSIGN_OR_RETURN(Task task, FromTaskRecord(stmt.ColumnText(1), stmt.ColumnText(2),
                                                    {stmt.ColumnText(3), stmt.ColumnText(4)}));
      tasks.push_back({stmt.ColumnInt64(0), std::move(task)});
    }
    return tasks;
  }
  std::vector<Task> new_tasks;
  for (const std::string& path : config.tasks.files) {
    auto loaded = LoadTaskFile(path);
    if (!loaded.ok()) return loaded.status().Wrap("tasks.files");
    for (Task& task : *loaded) new_tasks.push_back(std::move(task));
  }
  tasks::InstanceSet set;
  for (const std::string& family : config.tasks.families) set.families.push_back(FindTaskFamily(family));
  set.min_difficulty = static_cast<int>(config.tasks.min_difficulty);
  set.max_difficulty = static_cast<int>(config.tasks.max_difficulty);
  for (int64_t i = 0; !set.families.empty() && i < config.tasks.count; ++i) {
    new_tasks.push_back(tasks::Instance(tasks::Purpose::kTrain, config.tasks.seed, i, set).task);
  }
  sqlite::Transaction txn = sqlite::Transaction::Begin(db).value();
  for (Task& task : new_tasks) {
    const TaskRecord record = ToTaskRecord(task);
    store::NewTask row;
    row.job_id = job_id;
    row.family = task.family;
    row.source_key = task.id;
    row.problem_json = record.problem_json;
    row.verifier_json = record.verifier_json;
    row.difficulty = task.difficulty;
    FR_ASSIGN_OR_RETURN(int64_t id, store::InsertTask(db, row));
    tasks.push_back({id, std::move(task)});
  }
  FR_RETURN_IF_ERROR(txn.Commit());
  return tasks;
}

Result<std::map<int64_t, std::set<int>>> RecoverSlots(sqlite::Database& db, int64_t job_id) {
  FR_RETURN_IF_ERROR(store::SupersedeUnfinished(db, job_id));
  FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                      db.Prepare("SELECT group_id, slot FROM samples WHERE job_id = ?1"
                                 " AND status IN ('completed', 'failed') AND slot IS NOT NULL"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  std::map<int64_t, std::set<int>> done;
  while (true) {
    FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    done[stmt.ColumnInt64(0)].insert(static_cast<int>(stmt.ColumnInt64(1)));
  }
  return done;
}

Result<std::set<int64_t>> DurablyTrainedGroups(sqlite::Database& db, int64_t job_id) {
  FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                      db.Prepare("SELECT DISTINCT group_id FROM samples WHERE job_id = ?1"
                                 " AND trained_at_version IS NOT NULL"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  std::set<int64_t> groups;
  while (true) {
    FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    groups.insert(stmt.ColumnInt64(0));
  }
  return groups;
}

Status RecordTrainedSamples(sqlite::Database& db, const std::vector<int64_t>& sample_ids, int64_t version,
                            int64_t max_staleness) {
  std::vector<store::TrainedSample> trained;
  for (int64_t id : sample_ids) {
    FR_ASSIGN_OR_RETURN(std::vector<store::Turn> turns, store::LoadTurns(db, id));
    store::TrainedSample sample{id, {}};
    for (const store::Turn& turn : turns) {
      if (turn.role != store::TurnRole::kAssistant || turn.loss_mask.size() != turn.token_ids.size()) continue;
      std::vector<uint8_t> mask = SampleScheduler::LossMask(turn.policy_versions, version, max_staleness);
      for (size_t i = 0; i < mask.size(); ++i) mask[i] &= turn.loss_mask[i];
      sample.loss_masks.emplace_back(turn.turn_index, std::move(mask));
    }
    trained.push_back(std::move(sample));
  }
  return store::RecordTrained(db, trained, version);
}

}  // namespace flashroll
