#include "engine/format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/json.h"

namespace flashroll::engine {
namespace {

// Element sizes of the dtypes safetensors defines; 0 for an unknown name.
uint64_t ElementSize(std::string_view dtype) {
  static const std::pair<const char*, uint64_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"U64", 8}, {"I32", 4},
      {"U32", 4}, {"I16", 2}, {"U16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1},
      {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

std::optional<kernels::DType> ComputeType(std::string_view dtype) {
  if (dtype == "F32") return kernels::DType::kF32;
  if (dtype == "F16") return kernels::DType::kF16;
  if (dtype == "BF16") return kernels::DType::kBF16;
  return std::nullopt;
}

Status ParseEntry(const JsonView& entry, const std::string& name, uint64_t data_size,
                  SafetensorsTensor* t) {
  FR_RETURN_IF_ERROR(entry.ExpectObject());
  FR_ASSIGN_OR_RETURN(t->dtype_name, entry.GetString("dtype"));
  const uint64_t elem = ElementSize(t->dtype_name);
  if (elem == 0) return Status::InvalidArgument("unknown dtype '" + t->dtype_name + "'");
  t->dtype = ComputeType(t->dtype_name);
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> dims, entry.GetArray("shape"));
  uint64_t count = 1;
  for (const JsonView& d : dims) {
    FR_ASSIGN_OR_RETURN(uint64_t dim, d.AsUint());
    if (dim > (uint64_t{1} << 40) || (dim != 0 && count > std::numeric_limits<uint64_t>::max() / dim)) {
      return Status::InvalidArgument("shape dimension " + std::to_string(dim) + " is too large");
    }
    count *= dim;
    t->shape.push_back(static_cast<int64_t>(dim));
  }
  if (count > std::numeric_limits<uint64_t>::max() / elem || count > (uint64_t{1} << 50)) {
    return Status::InvalidArgument("shape has too many elements");
  }
  t->num_elements = static_cast<int64_t>(count);
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> offsets, entry.GetArray("data_offsets"));
  if (offsets.size() != 2) return Status::InvalidArgument("data_offsets: expected [begin, end]");
  FR_ASSIGN_OR_RETURN(uint64_t begin, offsets[0].AsUint());
  FR_ASSIGN_OR_RETURN(uint64_t end, offsets[1].AsUint());
  if (begin > end || end > data_size) {
    return Status::Corruption("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                              "] lie outside the data section of " + std::to_string(data_size) +
                              " bytes (truncated file?)");
  }
  if (end - begin != count * elem) {
    return Status::Corruption("data_offsets span " + std::to_string(end - begin) + " bytes but " +
                              t->dtype_name + " of " + std::to_string(count) + " elements needs " +
                              std::to_string(count * elem));
  }
  t->name = name;
  t->size_bytes = end - begin;
  t->file_offset = begin;  // made absolute by the caller
  return Status::Ok();
}

}  // namespace

Result<std::vector<SafetensorsTensor>> ParseSafetensors(const uint8_t* data, size_t size,
                                                        const std::string& what) {
  if (size < 8) {
    return Status::Corruption(what + ": file is " + std::to_string(size) +
                              " bytes, too short for the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > size - 8) {
    return Status::Corruption(what + ": header length " + std::to_string(header_len) +
                              " at byte offset 0 runs past the end of the file (" +
                              std::to_string(size) + " bytes; truncated?)");
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  Result<Json> header = ParseJson(
      std::string_view(reinterpret_cast<const char*>(data) + 8, header_len), what + ": header");
  if (!header.ok()) return header.status();
  if (!header->is_object()) return Status::InvalidArgument(what + ": header is not a JSON object");

  std::vector<SafetensorsTensor> tensors;
  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensor t;
    Status st = ParseEntry(JsonView(value, ""), name, data_size, &t);
    if (!st.ok()) return st.Wrap(what + ": tensor '" + name + "'");
    t.data = data + data_start + t.file_offset;
    t.file_offset += data_start;
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.file_offset < b.file_offset;
            });
  for (size_t i = 1; i < tensors.size(); ++i) {
    const SafetensorsTensor& prev = tensors[i - 1];
    if (prev.file_offset + prev.size_bytes > tensors[i].file_offset) {
      return Status::Corruption(what + ": tensor '" + tensors[i].name + "' overlaps tensor '" +
                                prev.name + "'");
    }
  }
  return tensors;
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<MappedFile> file,
                                 std::vector<SafetensorsTensor> tensors)
    : file_(std::move(file)), tensors_(std::move(tensors)) {
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return Open(std::move(file));
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(std::unique_ptr<MappedFile> file) {
  FR_ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
                      ParseSafetensors(file->data(), file->size(), file->path()));
  return std::unique_ptr<SafetensorsFile>(new SafetensorsFile(std::move(file), std::move(tensors)));
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace flashroll::engine
