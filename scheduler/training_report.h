// The training part of an RL job's closing summary: the trainer's per-step
// table (read from its JSON-lines log) and the fixed evaluation set before
// and after training, each change with its standard error.
//
// Thread safety: plain functions.
#pragma once

#include <string>

#include "common/json.h"

namespace flashroll {

// One row per line of the trainer's log (flashroll.trainers: step, version,
// samples, success, reward_by_effort, reasoning_tokens_by_effort,
// mismatch_abs, clip_fraction, tokens_per_s). Lines that are not JSON
// objects are skipped; a missing file gives "".
std::string TrainingStepsTable(const std::string& log_path);

// The status line's part for the trainer's last step in its log, of the
// `steps` the job ends at: "step 3/20 loss 0.0123 reverse_kl 0.0123"
// (reverse_kl, clip_fraction, kl when the trainer logs them); "step 0/20"
// before the first step.
std::string LastStepStatus(const std::string& log_path, int64_t steps);

// eval = {"before": EvalReport JSON, "after": ...}: per effort and in total,
// success before and after with the change and its standard error, and mean
// reasoning tokens with the change and a 95% interval. With both sides'
// "episodes" (the same episodes, paired by index) the errors are those of
// the mean per-episode difference; without, of two independent samples.
// One table per set and temperature (scheduler/job_evaluation.h): the
// tuning set's, then its "at_temperature_T" (each other temperature), then
// the "test" set's and its, each where both sides have it, under a header
// naming it. "" when either side is missing.
std::string EvalComparison(const Json& eval);

// One evaluation side (eval["before"] of `flashroll run --evaluate-only`
// without --weights): per set and temperature, success with its standard
// error and per effort, and the mean reasoning tokens.
std::string EvalOverview(const Json& side);

}  // namespace flashroll
