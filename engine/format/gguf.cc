#include "engine/format/gguf.h"

#include <cstring>
#include <limits>

namespace flashroll::engine {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;

struct TypeTraitsEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block layouts from ggml's type_traits (elements per block, bytes per block).
constexpr TypeTraitsEntry kGgmlTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

// Size in bytes of a scalar metadata type, 0 for string/array/unknown.
uint64_t ScalarSize(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    default: return 0;
  }
}

bool IsIntType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

bool IsFloatType(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

template <typename T>
T LoadLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the host is little-endian, like GGUF
  return v;
}

// Sequential reader over the mapping; every read is bounds-checked and an
// error names the file, the current item and the byte offset.
class Reader {
 public:
  Reader(const MappedFile& file) : file_(file) {}

  uint64_t offset() const { return off_; }
  uint64_t left() const { return file_.size() - off_; }
  void set_context(std::string context) { context_ = std::move(context); }

  Status Error(uint64_t at, std::string_view why) const {
    std::string m = file_.path() + ": ";
    if (!context_.empty()) m += context_ + " ";
    m += "at byte offset " + std::to_string(at) + ": ";
    m += why;
    return Status::Corruption(std::move(m));
  }

  Status Need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      return Error(off_, std::string(what) + " needs " + std::to_string(n) + " bytes but only " +
                             std::to_string(left()) + " are left in the file (" +
                             std::to_string(file_.size()) + " bytes)");
    }
    return Status::Ok();
  }

  template <typename T>
  Result<T> Read(std::string_view what) {
    FR_RETURN_IF_ERROR(Need(sizeof(T), what));
    T v = LoadLe<T>(file_.data() + off_);
    off_ += sizeof(T);
    return v;
  }

  Result<std::string_view> ReadString(std::string_view what) {
    uint64_t at = off_;
    FR_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(std::string(what) + " length"));
    if (len > left()) {
      return Error(at, std::string(what) + " length " + std::to_string(len) + " exceeds the " +
                           std::to_string(left()) + " bytes left in the file");
    }
    std::string_view s(reinterpret_cast<const char*>(file_.data() + off_), len);
    off_ += len;
    return s;
  }

  Status Skip(uint64_t n, std::string_view what) {
    FR_RETURN_IF_ERROR(Need(n, what));
    off_ += n;
    return Status::Ok();
  }

 private:
  const MappedFile& file_;
  uint64_t off_ = 0;
  std::string context_;
};

}  // namespace

std::string GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "type " + std::to_string(static_cast<uint32_t>(type));
}

const GgmlTypeTraits* FindGgmlTypeTraits(uint32_t id) {
  for (const auto& e : kGgmlTypes) {
    if (e.id == id) return &e.traits;
  }
  return nullptr;
}

bool GgmlTypeSupported(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: return true;
    default: return false;
  }
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  FR_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  return Parse(std::move(file));
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::unique_ptr<MappedFile> file) {
  std::unique_ptr<GgufFile> gguf(new GgufFile(std::move(file)));
  FR_RETURN_IF_ERROR(gguf->ParseAll());
  return gguf;
}

Status GgufFile::ParseAll() {
  Reader r(*file_);
  r.set_context("header");
  FR_ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  if (magic != kMagic) return r.Error(0, "not a GGUF file (bad magic)");
  FR_ASSIGN_OR_RETURN(version_, r.Read<uint32_t>("version"));
  if (version_ != 2 && version_ != 3) {
    std::string why = "unsupported GGUF version " + std::to_string(version_);
    if ((version_ & 0xFFFF) == 0) why += " (big-endian file?)";
    if (version_ == 1) why += " (v1 is obsolete)";
    return r.Error(4, why);
  }
  FR_ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("tensor count"));
  FR_ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("metadata count"));
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes, each
  // tensor info at least 8 + 4 + 4 + 8: reject lying counts before reserving.
  if (n_kv > r.left() / 13) {
    return r.Error(16, "metadata count " + std::to_string(n_kv) + " cannot fit in the file");
  }
  if (n_tensors > r.left() / 24) {
    return r.Error(8, "tensor count " + std::to_string(n_tensors) + " cannot fit in the file");
  }

  entries_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t entry_at = r.offset();
    r.set_context("metadata entry " + std::to_string(i));
    FR_ASSIGN_OR_RETURN(std::string_view key, r.ReadString("key"));
    r.set_context("metadata key '" + std::string(key) + "'");
    if (entry_index_.count(key)) return r.Error(entry_at, "duplicate key");
    FR_ASSIGN_OR_RETURN(uint32_t type, r.Read<uint32_t>("value type"));
    Value v{};
    v.type = static_cast<GgufType>(type);
    if (v.type == GgufType::kString) {
      FR_ASSIGN_OR_RETURN(v.string, r.ReadString("string value"));
      v.offset = r.offset() - v.string.size();
    } else if (v.type == GgufType::kArray) {
      FR_ASSIGN_OR_RETURN(uint32_t et, r.Read<uint32_t>("array element type"));
      FR_ASSIGN_OR_RETURN(v.count, r.Read<uint64_t>("array length"));
      v.element_type = static_cast<GgufType>(et);
      v.offset = r.offset();
      if (v.element_type == GgufType::kString) {
        if (v.count > r.left() / 8) {
          return r.Error(v.offset - 8, "array of " + std::to_string(v.count) +
                                           " strings cannot fit in the " +
                                           std::to_string(r.left()) + " bytes left");
        }
        for (uint64_t k = 0; k < v.count; ++k) {
          FR_RETURN_IF_ERROR(r.ReadString("string element " + std::to_string(k)).status());
        }
      } else {
        uint64_t size = ScalarSize(et);
        if (size == 0) {
          return r.Error(v.offset - 12, "unsupported array element type " + std::to_string(et));
        }
        if (v.count > r.left() / size) {
          return r.Error(v.offset - 8, "array of " + std::to_string(v.count) + " " +
                                           GgufTypeName(v.element_type) + " exceeds the " +
                                           std::to_string(r.left()) + " bytes left");
        }
        FR_RETURN_IF_ERROR(r.Skip(v.count * size, "array data"));
      }
    } else {
      uint64_t size = ScalarSize(type);
      if (size == 0) return r.Error(r.offset() - 4, "unknown value type " + std::to_string(type));
      v.offset = r.offset();
      FR_RETURN_IF_ERROR(r.Skip(size, GgufTypeName(v.type) + " value"));
      if (v.type == GgufType::kBool && file_->data()[v.offset] > 1) {
        return r.Error(v.offset, "bool value " + std::to_string(file_->data()[v.offset]));
      }
    }
    entry_index_.emplace(key, entries_.size());
    entries_.push_back(Entry{key, v});
  }

  auto align_it = entry_index_.find("general.alignment");
  if (align_it != entry_index_.end()) {
    const Value& v = entries_[align_it->second].value;
    if (v.type != GgufType::kUint32) {
      return Status::Corruption(path() + ": general.alignment has type " + GgufTypeName(v.type) +
                                ", want uint32");
    }
    alignment_ = LoadLe<uint32_t>(file_->data() + v.offset);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
      return Status::Corruption(path() + ": general.alignment " + std::to_string(alignment_) +
                                " at byte offset " + std::to_string(v.offset) +
                                " is not a power of two");
    }
  } else {
    alignment_ = kDefaultAlignment;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    uint64_t info_at = r.offset();
    r.set_context("tensor info " + std::to_string(i));
    FR_ASSIGN_OR_RETURN(std::string_view name, r.ReadString("name"));
    r.set_context("tensor '" + std::string(name) + "'");
    GgufTensor t;
    t.name = std::string(name);
    FR_ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>("dimension count"));
    if (n_dims > kMaxDims) {
      return r.Error(r.offset() - 4, std::to_string(n_dims) + " dimensions (at most 4)");
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      FR_ASSIGN_OR_RETURN(uint64_t dim, r.Read<uint64_t>("dimension"));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(elements, static_cast<int64_t>(dim), &elements)) {
        return r.Error(r.offset() - 8, "dimension " + std::to_string(d) + " = " +
                                           std::to_string(dim) + " overflows the element count");
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.num_elements = elements;
    FR_ASSIGN_OR_RETURN(uint32_t type, r.Read<uint32_t>("type"));
    const GgmlTypeTraits* traits = FindGgmlTypeTraits(type);
    if (traits == nullptr) return r.Error(r.offset() - 4, "unknown ggml type " + std::to_string(type));
    t.type = static_cast<GgmlType>(type);
    int64_t ne0 = t.dims.empty() ? 1 : t.dims[0];
    if (ne0 % traits->block_size != 0) {
      return r.Error(info_at, std::string("dimension 0 = ") + std::to_string(ne0) +
                                  " is not a multiple of the " + traits->name + " block size " +
                                  std::to_string(traits->block_size));
    }
    uint64_t blocks = static_cast<uint64_t>(elements / traits->block_size);
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->type_size), &t.size_bytes)) {
      return r.Error(info_at, "byte size overflows");
    }
    FR_ASSIGN_OR_RETURN(uint64_t rel, r.Read<uint64_t>("data offset"));
    if (rel % alignment_ != 0) {
      return r.Error(r.offset() - 8, "data offset " + std::to_string(rel) +
                                         " is not a multiple of the alignment " +
                                         std::to_string(alignment_));
    }
    t.file_offset = rel;  // made absolute below, once the data section is known
    if (tensor_index_.count(name)) return r.Error(info_at, "duplicate tensor name");
    tensor_index_.emplace(name, tensors_.size());  // key views the mapping, not t.name
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment; a file
  // with no tensors may end before it.
  uint64_t end = r.offset();
  uint64_t pad = (alignment_ - end % alignment_) % alignment_;
  data_offset_ = end + pad;
  if (!tensors_.empty() && data_offset_ > file_->size()) {
    return Status::Corruption(path() + ": data section at byte offset " +
                              std::to_string(data_offset_) + " starts past the end of the file (" +
                              std::to_string(file_->size()) + " bytes)");
  }
  uint64_t data_size = file_->size() >= data_offset_ ? file_->size() - data_offset_ : 0;
  for (GgufTensor& t : tensors_) {
    uint64_t rel = t.file_offset;
    if (rel > data_size || t.size_bytes > data_size - rel) {
      return Status::Corruption(
          path() + ": tensor '" + t.name + "': data [" + std::to_string(data_offset_ + rel) +
          ", +" + std::to_string(t.size_bytes) + ") runs past the end of the file (" +
          std::to_string(file_->size()) + " bytes)");
    }
    t.file_offset = data_offset_ + rel;
    t.data = file_->data() + t.file_offset;
  }
  return Status::Ok();
}

bool GgufFile::Has(std::string_view key) const { return entry_index_.count(key) != 0; }

Result<const GgufFile::Value*> GgufFile::Find(std::string_view key) const {
  auto it = entry_index_.find(key);
  if (it == entry_index_.end()) {
    return Status::NotFound(path() + ": metadata key '" + std::string(key) + "' not found");
  }
  return &entries_[it->second].value;
}

Status GgufFile::TypeMismatch(std::string_view key, std::string_view wanted, const Value& v) const {
  std::string have = GgufTypeName(v.type);
  if (v.type == GgufType::kArray) have += " of " + GgufTypeName(v.element_type);
  return Status::InvalidArgument(path() + ": metadata key '" + std::string(key) + "' at byte offset " +
                                 std::to_string(v.offset) + " is " + have + ", want " +
                                 std::string(wanted));
}

int64_t GgufFile::ReadIntAt(GgufType type, uint64_t offset) const {
  const uint8_t* p = file_->data() + offset;
  switch (type) {
    case GgufType::kUint8: return LoadLe<uint8_t>(p);
    case GgufType::kInt8: return LoadLe<int8_t>(p);
    case GgufType::kUint16: return LoadLe<uint16_t>(p);
    case GgufType::kInt16: return LoadLe<int16_t>(p);
    case GgufType::kUint32: return LoadLe<uint32_t>(p);
    case GgufType::kInt32: return LoadLe<int32_t>(p);
    case GgufType::kUint64: return static_cast<int64_t>(LoadLe<uint64_t>(p));
    case GgufType::kInt64: return LoadLe<int64_t>(p);
    default: return 0;
  }
}

double GgufFile::ReadFloatAt(GgufType type, uint64_t offset) const {
  const uint8_t* p = file_->data() + offset;
  if (type == GgufType::kFloat32) return LoadLe<float>(p);
  if (type == GgufType::kFloat64) return LoadLe<double>(p);
  return static_cast<double>(ReadIntAt(type, offset));
}

Result<GgufType> GgufFile::TypeOf(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  return v->type;
}

Result<GgufType> GgufFile::ArrayTypeOf(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kArray) return TypeMismatch(key, "array", *v);
  return v->element_type;
}

std::vector<std::string_view> GgufFile::Keys() const {
  std::vector<std::string_view> keys;
  keys.reserve(entries_.size());
  for (const Entry& e : entries_) keys.push_back(e.key);
  return keys;
}

Result<std::string_view> GgufFile::GetString(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kString) return TypeMismatch(key, "string", *v);
  return v->string;
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (!IsIntType(v->type)) return TypeMismatch(key, "an integer", *v);
  if (v->type == GgufType::kUint64 &&
      LoadLe<uint64_t>(file_->data() + v->offset) >
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::InvalidArgument(path() + ": metadata key '" + std::string(key) +
                                   "': uint64 value does not fit in int64");
  }
  return ReadIntAt(v->type, v->offset);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (!IsFloatType(v->type) && !IsIntType(v->type)) return TypeMismatch(key, "a number", *v);
  return ReadFloatAt(v->type, v->offset);
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kBool) return TypeMismatch(key, "bool", *v);
  return file_->data()[v->offset] != 0;
}

Result<uint64_t> GgufFile::ArraySize(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kArray) return TypeMismatch(key, "array", *v);
  return v->count;
}

Result<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kArray || v->element_type != GgufType::kString) {
    return TypeMismatch(key, "array of string", *v);
  }
  // Lengths were validated at parse time.
  std::vector<std::string_view> out;
  out.reserve(v->count);
  uint64_t off = v->offset;
  for (uint64_t i = 0; i < v->count; ++i) {
    uint64_t len = LoadLe<uint64_t>(file_->data() + off);
    off += 8;
    out.emplace_back(reinterpret_cast<const char*>(file_->data() + off), len);
    off += len;
  }
  return out;
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kArray || !IsFloatType(v->element_type)) {
    return TypeMismatch(key, "array of float", *v);
  }
  uint64_t size = ScalarSize(static_cast<uint32_t>(v->element_type));
  std::vector<float> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    out[i] = static_cast<float>(ReadFloatAt(v->element_type, v->offset + i * size));
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  FR_ASSIGN_OR_RETURN(const Value* v, Find(key));
  if (v->type != GgufType::kArray || !IsIntType(v->element_type)) {
    return TypeMismatch(key, "array of integers", *v);
  }
  uint64_t size = ScalarSize(static_cast<uint32_t>(v->element_type));
  std::vector<int64_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    uint64_t at = v->offset + i * size;
    if (v->element_type == GgufType::kUint64 &&
        LoadLe<uint64_t>(file_->data() + at) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(path() + ": metadata key '" + std::string(key) + "'[" +
                                     std::to_string(i) + "] at byte offset " + std::to_string(at) +
                                     ": uint64 value does not fit in int64");
    }
    out[i] = ReadIntAt(v->element_type, at);
  }
  return out;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace flashroll::engine
