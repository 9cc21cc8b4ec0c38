// SequenceFile: one paused sequence on disk (Engine::Pause with to_disk):
// what the engine keeps of the sequence and the KV of every computed token,
// so that Resume continues it bitwise as if it had never stopped.
//
// Format, version 2; integers little-endian (the byte order of every host
// Flashroll builds for, checked at compile time):
//   header, 24 bytes:
//     magic "FRSEQKV\0" (8) | format version u32 | CRC-32C of the payload u32
//     | payload bytes u64
//   payload:
//     sequence_id u64 | choice i32 | scoring u32 (0 or 1) | weight_version i64
//     | KV layout: dtype u32 (0 f32, 1 bf16), num_layers, num_kv_heads,
//       head_dim, block_size (i64 each)
//     | prompt_len i64 | computed i64
//     | token count u64, tokens i32[count]
//     | hash count u64, hashes u64[count]  (the prefix-cache hashes of the
//       leading full blocks, re-registered on load)
//     | routing bytes u64, routing u8[bytes]  (MoE models: the compact
//       routing of every token computed so far, routing.h; 0 bytes for
//       dense models)
//     | block count u64, block versions i64[count]  (the oldest weight
//       version whose KV each of the ceil(computed / block_size) blocks
//       holds)
//     | KV: the rest, computed x layout.TokenBytes() bytes laid out
//       [layer][keys, values][kv_head][token][head_dim]
//       (PagedKvStorage::ExportTokens).
// Nothing else is needed to continue: choice c's token t is drawn with
// UniformDouble(seed, c, t) (sampler.h), t being the count of generated
// tokens, so the tokens and the choice are the sampler's position (the seed
// and the other sampling parameters stay with the request in memory). The
// logprobs and weight versions of tokens already generated are not kept by
// the engine: they went out on the request's stream.
//
// A file is written to "<path>.tmp", fsynced, renamed over <path> and the
// directory fsynced, so a crash leaves either no file or a whole one; the
// checksum catches a file damaged later.
//
// Thread safety: pure functions over distinct files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/models/paged_kv_storage.h"

namespace flashroll::engine {

// Version 1 had no routing; its files are refused (Corruption naming both
// versions), never read as version 2.
inline constexpr uint32_t kSequenceFileVersion = 2;
inline constexpr int64_t kSequenceFileHeaderBytes = 24;

struct SequenceSnapshot {
  uint64_t sequence_id = 0;
  int32_t choice = 0;
  bool scoring = false;
  int64_t weight_version = 0;  // the engine's when the sequence was saved
  KvLayout layout;
  int64_t prompt_len = 0;
  int64_t computed = 0;         // tokens whose KV is in `kv`
  std::vector<int32_t> tokens;  // prompt + generated
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> routing;  // [token][moe_layer][k], compact (routing.h)
  std::vector<int64_t> block_versions;  // [ceil(computed / block_size)]
  // computed * layout.TokenBytes() bytes. Owned by the caller when writing;
  // after ReadSequenceFile it points into `storage`.
  std::span<const uint8_t> kv;
  std::unique_ptr<uint8_t[]> storage;
};

// "<dir>/sequence-<id>.kv": where the engine keeps sequence `id` paused to disk.
std::string SequenceFilePath(const std::string& dir, uint64_t sequence_id);

// Writes `snapshot` to `path` as described above. On failure no file is
// left at `path` or "<path>.tmp", and the Status (kIoError, or the code
// errno maps to) names the file and the call that failed.
Status WriteSequenceFile(const std::string& path, const SequenceSnapshot& snapshot);

// Reads and checks a file written by WriteSequenceFile. Corruption, the
// message starting with "sequence file <path>: ", when the file is shorter
// than its header or its payload size says, has another magic, another
// format version, a checksum that does not match, or a payload whose fields
// do not fit together; the error of open/read (naming the file) when it
// cannot be read.
Result<SequenceSnapshot> ReadSequenceFile(const std::string& path);

}  // namespace flashroll::engine
