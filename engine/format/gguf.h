// GgufFile: a parsed GGUF (v2/v3) model or vocabulary file.
//
// GGUF is llama.cpp's single-file format: a header, typed metadata key/values,
// tensor descriptions, then the aligned tensor data. The file is mapped
// read-only; metadata strings, arrays and tensor data are views into that
// mapping, so everything returned by a GgufFile (string_views, pointers) is
// valid only while the GgufFile lives.
//
// Every length, count, offset and dimension is checked against the file size
// before it is used: a truncated or corrupt file yields a Status naming the
// file, the key or tensor, and the byte offset, never a crash or an
// allocation sized by an unchecked field.
//
// Thread safety: immutable after Open(); all const methods may be called from
// any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/format/mapped_file.h"

namespace flashroll::engine {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", "array", ...; "type N" for an unknown id.
std::string GgufTypeName(GgufType type);

// Tensor element types, numbered as in ggml. Ids not listed here are
// rejected at parse time; listed ids outside GgmlTypeSupported() parse
// (their sizes are known) but the engine cannot compute with them.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Layout of one ggml type: `block_size` elements are stored in `type_size`
// bytes (1 and sizeof(element) for plain types).
struct GgmlTypeTraits {
  const char* name;
  int64_t block_size;
  int64_t type_size;
};

// The traits of `id`, or nullptr when ggml has no such type.
const GgmlTypeTraits* FindGgmlTypeTraits(uint32_t id);

// True for the types the engine computes with: F32, F16, BF16, Q4_0, Q8_0.
bool GgmlTypeSupported(GgmlType type);

struct GgufTensor {
  std::string name;
  // Dimensions in GGUF/ggml order: dims[0] (ne[0]) is the innermost,
  // contiguous one. A PyTorch [rows, cols] weight is stored as {cols, rows}.
  std::vector<int64_t> dims;
  GgmlType type;
  int64_t num_elements;
  uint64_t size_bytes;     // from the type's block layout
  uint64_t file_offset;    // absolute offset of the data in the file
  const uint8_t* data;     // points into the mapping
};

class GgufFile {
 public:
  // Maps and parses `path`. Returns the file, or the open/mmap error, or
  // kCorruption / kInvalidArgument "<path>: <what> at byte offset N: <why>"
  // for anything malformed: bad magic, unsupported version (v1 or
  // big-endian), duplicate keys or tensor names, lengths or counts that run
  // past the end of the file, unknown value or tensor types, bad alignment,
  // tensor data outside the file.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);

  // Parses an already mapped file; Open() is this plus MappedFile::Open().
  static Result<std::unique_ptr<GgufFile>> Parse(std::unique_ptr<MappedFile> file);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return file_->path(); }
  const MappedFile& mapping() const { return *file_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Absolute offset where the tensor data section begins.
  uint64_t data_offset() const { return data_offset_; }

  // ---- Metadata. Getters return kNotFound "<path>: metadata key 'k' not
  // found" when absent and kInvalidArgument naming the key and both types
  // when the stored type does not fit.
  bool Has(std::string_view key) const;
  // The stored type of `key` (for arrays: kArray), or kNotFound.
  Result<GgufType> TypeOf(std::string_view key) const;
  // The element type of an array key, or an error if `key` is not an array.
  Result<GgufType> ArrayTypeOf(std::string_view key) const;
  // Keys in file order.
  std::vector<std::string_view> Keys() const;

  Result<std::string_view> GetString(std::string_view key) const;
  // Any integer type; fails if a uint64 value does not fit in int64.
  Result<int64_t> GetInt(std::string_view key) const;
  // float32 or float64 (integers are accepted and converted).
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  // Arrays. The views point into the mapping.
  Result<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;  // float32/float64 elements
  // Any integer elements; fails if a uint64 element does not fit in int64.
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  // Number of elements of an array key.
  Result<uint64_t> ArraySize(std::string_view key) const;

  // ---- Tensors, in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or nullptr.
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  struct Value {
    GgufType type;
    GgufType element_type;  // arrays only
    uint64_t count;         // arrays only
    uint64_t offset;        // absolute offset of the payload (after the type, and for
                            // arrays after element type and count)
    std::string_view string;  // strings only
  };
  struct Entry {
    std::string_view key;
    Value value;
  };

  explicit GgufFile(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}
  Status ParseAll();
  Result<const Value*> Find(std::string_view key) const;
  Status TypeMismatch(std::string_view key, std::string_view wanted, const Value& v) const;
  int64_t ReadIntAt(GgufType type, uint64_t offset) const;
  double ReadFloatAt(GgufType type, uint64_t offset) const;

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<Entry> entries_;
  std::unordered_map<std::string_view, size_t> entry_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace flashroll::engine
