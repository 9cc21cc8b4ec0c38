// The two wire forms of a leased batch that GET /v1/batches serves: JSON
// (every TrainingGroup and TrainingSample field under its own name) and a
// compact little-endian binary form whose per-token arrays a trainer can
// view without parsing (numpy.frombuffer, torch.frombuffer). Both are
// described for client authors in docs/TRAINER_API.md; the decoders here are
// the reference a client in another language mirrors.
//
// Binary layout, version 1 (all integers little-endian):
//   offset 0   char[4]  magic "FRTB"
//          4   uint32   format version (1)
//          8   uint32   M: metadata length in bytes, a multiple of 4
//         12   uint32   S: number of samples, all groups together
//         16   M bytes  metadata: the JSON form without the four per-token
//                       arrays, padded with spaces (still valid JSON)
//   then S sample blocks, groups in order, samples in order within a group:
//              uint32   n: the sample's token count
//              int32    tokens[n]
//              float32  logprobs[n]
//              int32    versions[n]
//              uint8    loss_mask[n]
//              0-3 zero bytes, so the next block starts 4-byte aligned
//   and nothing after the last block.
//
// Thread safety: free functions on values; reentrant.
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "scheduler/batch_queue.h"

namespace flashroll {

inline constexpr char kBatchBinaryMagic[4] = {'F', 'R', 'T', 'B'};
inline constexpr uint32_t kBatchBinaryVersion = 1;

// {"lease": id, "expires_at_ms": <ms since the Unix epoch>, "groups": [
//   {"group_id", "task_id", "task_key", "effort", "samples": [
//     {"sample_id", "tokens", "logprobs", "versions", "loss_mask",
//      "prompt_tokens", "reward", "reward_parts": {name: value},
//      "advantage", "reasoning_tokens", "status", "success"}]}]}
Json BatchToJson(const BatchLease& batch);

// The inverse of BatchToJson. Errors: kInvalidArgument naming the field
// ("batch.groups[0].samples[1].tokens[3]: expected an integer ...").
Result<BatchLease> BatchFromJson(const Json& json);

// The binary form above.
std::string EncodeBatchBinary(const BatchLease& batch);

// The inverse of EncodeBatchBinary. Errors: kInvalidArgument for a wrong
// magic or version, a body cut short or with bytes left over, a metadata
// block that does not parse or whose sample count differs from S (each
// naming the byte offset or field).
Result<BatchLease> DecodeBatchBinary(std::string_view body);

}  // namespace flashroll
