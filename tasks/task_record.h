// A Task as the store keeps it: the problem (prompt, files, answer file,
// difficulty) and the verifier (the expected answer) as two JSON documents,
// so a resumed job runs exactly the tasks it started with, whatever the
// generators do in a later build.
//
// Thread safety: plain functions.
#pragma once

#include <string>

#include "common/status.h"
#include "tasks/task.h"

namespace flashroll {

struct TaskRecord {
  std::string problem_json;
  std::string verifier_json;
};

TaskRecord ToTaskRecord(const Task& task);

// The inverse of ToTaskRecord. kCorruption naming the task and the field
// when a document is not what ToTaskRecord writes.
Result<Task> FromTaskRecord(const std::string& family, const std::string& id, const TaskRecord& record);

}  // namespace flashroll
