// SafetensorsFile: a parsed, memory-mapped `.safetensors` file.
//
// The format is an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {...}}), then the raw little-endian tensor data; offsets are relative to
// the end of the header. Tensor data is not copied: SafetensorsTensor::data
// points into the mapping and is valid while the SafetensorsFile lives.
//
// Every length and offset is checked before use: a header that runs past the
// end of the file, offsets outside the data section, a byte count that
// disagrees with dtype x shape, overlapping tensors — each yields a Status
// naming the file and the tensor, never a crash.
//
// Thread safety: immutable after Open(); const methods may be called from
// any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/format/mapped_file.h"
#include "engine/kernels/dtype.h"

namespace flashroll::engine {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;                 // as written: "F32", "BF16", "I64", ...
  std::optional<kernels::DType> dtype;    // set for F32, F16 and BF16, the types the engine computes with
  std::vector<int64_t> shape;             // PyTorch order: shape[0] is the outermost
  int64_t num_elements = 0;
  const uint8_t* data = nullptr;          // into the mapping (or the buffer given to Parse)
  uint64_t size_bytes = 0;
  uint64_t file_offset = 0;               // absolute offset of the data in the file
};

// Parses a safetensors image held in memory. `what` names it in errors
// (normally the path). Tensors point into `data`, which must outlive them.
// Returns the tensors in data order, or kCorruption/kInvalidArgument
// "<what>: tensor 'name': <why>" / "<what>: header ...: <why>".
Result<std::vector<SafetensorsTensor>> ParseSafetensors(const uint8_t* data, size_t size,
                                                        const std::string& what);

class SafetensorsFile {
 public:
  // Maps and parses `path`. Returns the open/mmap error or a parse error
  // from ParseSafetensors.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses a file already mapped (its path() names it in errors).
  static Result<std::unique_ptr<SafetensorsFile>> Open(std::unique_ptr<MappedFile> file);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_->path(); }
  const MappedFile& mapping() const { return *file_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or nullptr.
  const SafetensorsTensor* Find(std::string_view name) const;

 private:
  SafetensorsFile(std::unique_ptr<MappedFile> file, std::vector<SafetensorsTensor> tensors);

  std::unique_ptr<MappedFile> file_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string_view, size_t> index_;
};

}  // namespace flashroll::engine
