#include "scheduler/trajectory.h"

#include <nlohmann/json.hpp>

#include "scheduler/sample_scheduler.h"

namespace flashroll {
namespace {

store::Turn PlainTurn(int64_t sample_id, store::TurnRole role, const Episode& e, int64_t begin, int64_t end,
                      const engine::Tokenizer& tokenizer) {
  store::Turn turn;
  turn.sample_id = sample_id;
  turn.role = role;
  turn.token_ids.assign(e.tokens.begin() + begin, e.tokens.begin() + end);
  turn.text = tokenizer.Decode(turn.token_ids);
  return turn;
}

}  // namespace

std::vector<store::Turn> TrajectoryTurns(int64_t sample_id, const Episode& e, const engine::Tokenizer& tokenizer,
                                         int64_t current_version, int64_t max_staleness) {
  std::vector<store::Turn> turns;
  int64_t cursor = 0;
  const auto add = [&](store::Turn turn) {
    turn.turn_index = static_cast<int>(turns.size());
    turns.push_back(std::move(turn));
  };
  for (const EpisodeTurn& t : e.turns) {
    // What precedes an assistant turn is the prompt (first) or a tool result.
    if (t.token_begin > cursor) {
      add(PlainTurn(sample_id, turns.empty() ? store::TurnRole::kUser : store::TurnRole::kTool, e, cursor,
                    t.token_begin, tokenizer));
    }
    store::Turn turn;
    turn.sample_id = sample_id;
    turn.role = store::TurnRole::kAssistant;
    turn.token_ids.assign(e.tokens.begin() + t.token_begin, e.tokens.begin() + t.token_end);
    turn.policy_versions.assign(e.versions.begin() + t.token_begin, e.versions.begin() + t.token_end);
    turn.logprobs.assign(e.logprobs.begin() + t.token_begin, e.logprobs.begin() + t.token_end);
    turn.loss_mask = SampleScheduler::LossMask(turn.policy_versions, current_version, max_staleness);
    turn.text = t.text;
    if (!t.command.empty()) turn.tool_call_json = nlohmann::json{{"name", "bash"}, {"command", t.command}}.dump();
    if (!t.command.empty()) {
      turn.tool_result_json = nlohmann::json{{"exit_code", t.tool_result.exit_code},
                                             {"timed_out", t.tool_result.timed_out},
                                             {"tool_ms", t.tool_ms}}
                                  .dump();
    }
    if (!turn.token_ids.empty()) add(std::move(turn));
    cursor = t.token_end;
  }
  const int64_t size = static_cast<int64_t>(e.tokens.size());
  if (size > cursor) {
    add(PlainTurn(sample_id, turns.empty() ? store::TurnRole::kUser : store::TurnRole::kTool, e, cursor, size,
                  tokenizer));
  }
  return turns;
}

Result<StoredSample> LoadStoredSample(sqlite::Database& db, int64_t sample_id) {
  const std::string what = "sample " + std::to_string(sample_id);
  FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                      db.Prepare("SELECT task_id, group_id, effort, status, reward, reward_parts_json, advantage,"
                                 " reasoning_tokens, error, slot, trained_at_version, failure_kind FROM samples WHERE id = ?1"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, sample_id));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::NotFound("no " + what);
  StoredSample out;
  out.task_id = stmt.ColumnInt64(0);
  out.group_id = stmt.ColumnInt64(1);
  out.effort = static_cast<int>(stmt.ColumnInt64(2));
  TrainingSample& s = out.sample;
  s.sample_id = sample_id;
  s.status = stmt.ColumnText(3);
  s.reward = stmt.IsNull(4) ? 0.0 : stmt.ColumnDouble(4);
  if (!stmt.IsNull(5)) {
    const nlohmann::json parts = nlohmann::json::parse(stmt.ColumnText(5), nullptr, false);
    if (!parts.is_object()) return Status::Corruption(what + ": reward_parts_json is not an object");
    for (const auto& [name, value] : parts.items()) {
      if (!value.is_number()) return Status::Corruption(what + ": reward part " + name + " is not a number");
      s.reward_parts[name] = value.get<double>();
    }
  }
  if (!stmt.IsNull(6)) out.advantage = stmt.ColumnDouble(6);
  s.advantage = out.advantage.value_or(0.0);
  s.reasoning_tokens = stmt.IsNull(7) ? 0 : stmt.ColumnInt64(7);
  if (!stmt.IsNull(8)) out.error = stmt.ColumnText(8);
  if (!stmt.IsNull(9)) out.slot = static_cast<int>(stmt.ColumnInt64(9));
  if (!stmt.IsNull(10)) out.trained_at_version = stmt.ColumnInt64(10);
  if (!stmt.IsNull(11)) out.failure_kind = stmt.ColumnText(11);
  s.success = s.reward_parts.count("verifier") && s.reward_parts["verifier"] >= 1.0;

  FR_ASSIGN_OR_RETURN(std::vector<store::Turn> turns, store::LoadTurns(db, sample_id));
  bool sampled_yet = false;
  for (const store::Turn& t : turns) {
    const size_t n = t.token_ids.size();
    if (t.role == store::TurnRole::kAssistant) {
      if (t.policy_versions.size() != n || t.logprobs.size() != n || t.loss_mask.size() != n) {
        return Status::Corruption(what + ": assistant turn " + std::to_string(t.turn_index) +
                                  " lacks per-token versions, logprobs or loss mask");
      }
      sampled_yet = true;
    }
    s.tokens.insert(s.tokens.end(), t.token_ids.begin(), t.token_ids.end());
    if (t.role == store::TurnRole::kAssistant) {
      s.versions.insert(s.versions.end(), t.policy_versions.begin(), t.policy_versions.end());
      s.logprobs.insert(s.logprobs.end(), t.logprobs.begin(), t.logprobs.end());
      s.loss_mask.insert(s.loss_mask.end(), t.loss_mask.begin(), t.loss_mask.end());
    } else {
      s.versions.insert(s.versions.end(), n, -1);
      s.logprobs.insert(s.logprobs.end(), n, 0.0f);
      s.loss_mask.insert(s.loss_mask.end(), n, 0);
      if (!sampled_yet) s.prompt_tokens += static_cast<int64_t>(n);
    }
  }
  return out;
}

Result<std::vector<StoredSample>> LoadGroupSamples(sqlite::Database& db, int64_t job_id, int64_t group_id) {
  FR_ASSIGN_OR_RETURN(sqlite::Statement stmt,
                      db.Prepare("SELECT id FROM samples WHERE job_id = ?1 AND group_id = ?2"
                                 " AND status IN ('completed', 'failed') ORDER BY id"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  FR_RETURN_IF_ERROR(stmt.Bind(2, group_id));
  std::vector<int64_t> ids;
  while (true) {
    FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    ids.push_back(stmt.ColumnInt64(0));
  }
  std::vector<StoredSample> samples;
  for (int64_t id : ids) {
    FR_ASSIGN_OR_RETURN(StoredSample s, LoadStoredSample(db, id));
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace flashroll
