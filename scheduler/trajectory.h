// Trajectories between the episode, the store and the trainer: an episode
// becomes the store's turns (prompt, then assistant and tool turns, each
// with its token ids, and for assistant turns the version, raw logprob and
// loss-mask bit of every token), and a stored sample becomes a
// TrainingSample by concatenating its turns again — so what the trainer
// reads is exactly what the engine sampled, and a resumed or exported job
// reads the same thing.
//
// Thread safety: plain functions; the Database is used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/sqlite.h"
#include "common/store.h"
#include "engine/tokenizer/tokenizer.h"
#include "rollout/episode.h"
#include "scheduler/training_batch.h"

namespace flashroll {

// The episode's turns for sample `sample_id`. Assistant tokens older than
// current_version - max_staleness get loss mask 0.
std::vector<store::Turn> TrajectoryTurns(int64_t sample_id, const Episode& episode,
                                         const engine::Tokenizer& tokenizer, int64_t current_version,
                                         int64_t max_staleness);

struct StoredSample {
  int64_t task_id = 0;
  int64_t group_id = 0;
  int effort = 100;
  std::optional<int> slot;                   // none in a store older than named slots
  std::optional<int64_t> trained_at_version;  // once the update that consumed it is durable
  std::optional<double> advantage;  // once the group finished
  std::string error;
  std::string failure_kind;         // an infrastructure failure's (rollout/failure_kind.h); empty: none
  TrainingSample sample;            // advantage filled from the column (0 when none)
};

// One sample with its concatenated turns. kNotFound for an unknown sample;
// kCorruption naming the sample for malformed stored data.
Result<StoredSample> LoadStoredSample(sqlite::Database& db, int64_t sample_id);

// The finished (completed or failed) samples of one group, by id.
Result<std::vector<StoredSample>> LoadGroupSamples(sqlite::Database& db, int64_t job_id, int64_t group_id);

}  // namespace flashroll
