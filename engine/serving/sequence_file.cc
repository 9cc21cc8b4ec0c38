#include "engine/serving/sequence_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/crc32c.h"

namespace flashroll::engine {
namespace {

static_assert(std::endian::native == std::endian::little, "sequence files are written in host byte order");

constexpr char kMagic[8] = {'F', 'R', 'S', 'E', 'Q', 'K', 'V', '\0'};

// Sole owner of a file descriptor, closed on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, reporting close's error (a delayed write error shows up here).
  int Close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write " + path);
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status ReadAll(int fd, uint8_t* out, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::read(fd, out, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "read " + path);
    // The size came from fstat: a file that shrinks under us is damaged too.
    if (n == 0) return Status::Corruption("sequence file " + path + ": ends early while being read");
    out += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WriteTemp(const std::string& tmp, std::span<const uint8_t> header, const std::string& meta,
                 std::span<const uint8_t> kv) {
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Status::FromErrno(errno, "open " + tmp);
  FR_RETURN_IF_ERROR(WriteAll(fd.get(), header, tmp));
  FR_RETURN_IF_ERROR(
      WriteAll(fd.get(), std::span(reinterpret_cast<const uint8_t*>(meta.data()), meta.size()), tmp));
  FR_RETURN_IF_ERROR(WriteAll(fd.get(), kv, tmp));
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + tmp);
  if (fd.Close() != 0) return Status::FromErrno(errno, "close " + tmp);
  return Status::Ok();
}

// The payload after the header, read field by field.
class PayloadReader {
 public:
  PayloadReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  bool Get(T* value) {
    if (size_ - pos_ < sizeof(T)) return false;
    std::memcpy(value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  template <typename T>
  bool GetArray(std::vector<T>* values) {
    uint64_t count = 0;
    if (!Get(&count) || count > (size_ - pos_) / sizeof(T)) return false;
    values->resize(static_cast<size_t>(count));
    if (count > 0) std::memcpy(values->data(), data_ + pos_, static_cast<size_t>(count) * sizeof(T));  // data() is null when empty
    pos_ += static_cast<size_t>(count) * sizeof(T);
    return true;
  }
  std::span<const uint8_t> Rest() const { return {data_ + pos_, size_ - pos_}; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

std::string SequenceFilePath(const std::string& dir, uint64_t sequence_id) {
  return dir + "/sequence-" + std::to_string(sequence_id) + ".kv";
}

Status WriteSequenceFile(const std::string& path, const SequenceSnapshot& s) {
  std::string meta;
  Put(&meta, s.sequence_id);
  Put(&meta, s.choice);
  Put<uint32_t>(&meta, s.scoring ? 1 : 0);
  Put(&meta, s.weight_version);
  Put<uint32_t>(&meta, s.layout.dtype == KvDType::kF32 ? 0 : 1);
  Put(&meta, s.layout.num_layers);
  Put(&meta, s.layout.num_kv_heads);
  Put(&meta, s.layout.head_dim);
  Put(&meta, s.layout.block_size);
  Put(&meta, s.prompt_len);
  Put(&meta, s.computed);
  Put<uint64_t>(&meta, s.tokens.size());
  meta.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
  Put<uint64_t>(&meta, s.hashes.size());
  meta.append(reinterpret_cast<const char*>(s.hashes.data()), s.hashes.size() * sizeof(uint64_t));
  Put<uint64_t>(&meta, s.routing.size());
  meta.append(reinterpret_cast<const char*>(s.routing.data()), s.routing.size());
  Put<uint64_t>(&meta, s.block_versions.size());
  meta.append(reinterpret_cast<const char*>(s.block_versions.data()), s.block_versions.size() * sizeof(int64_t));

  std::string header(kMagic, sizeof(kMagic));
  Put(&header, kSequenceFileVersion);
  Put(&header, Crc32c(s.kv.data(), s.kv.size(), Crc32c(meta.data(), meta.size())));
  Put<uint64_t>(&header, meta.size() + s.kv.size());

  const std::string tmp = path + ".tmp";
  Status st = WriteTemp(tmp, std::span(reinterpret_cast<const uint8_t*>(header.data()), header.size()), meta, s.kv);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Status::FromErrno(errno, "rename " + tmp + " to " + path);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename itself is durable once the directory is.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0 || ::fsync(dfd.get()) != 0) {
    st = Status::FromErrno(errno, "fsync directory " + dir);
    ::unlink(path.c_str());
  }
  return st;
}

Result<SequenceSnapshot> ReadSequenceFile(const std::string& path) {
  const std::string where = "sequence file " + path + ": ";
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kSequenceFileHeaderBytes) {
    return Status::Corruption(where + "truncated: " + std::to_string(size) + " bytes, shorter than the " +
                              std::to_string(kSequenceFileHeaderBytes) + "-byte header");
  }
  uint8_t header[kSequenceFileHeaderBytes];
  FR_RETURN_IF_ERROR(ReadAll(fd.get(), header, sizeof(header), path));
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption(where + "not a sequence file (bad magic)");
  }
  uint32_t version, crc;
  uint64_t payload_bytes;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&crc, header + 12, 4);
  std::memcpy(&payload_bytes, header + 16, 8);
  if (version != kSequenceFileVersion) {
    return Status::Corruption(where + "format version " + std::to_string(version) + ", this build reads version " +
                              std::to_string(kSequenceFileVersion) + " only");
  }
  if (payload_bytes != size - kSequenceFileHeaderBytes) {
    return Status::Corruption(where + "truncated or padded: the header says " + std::to_string(payload_bytes) +
                              " payload bytes, the file holds " + std::to_string(size - kSequenceFileHeaderBytes));
  }
  SequenceSnapshot s;
  s.storage.reset(new uint8_t[payload_bytes]);  // left uninitialised: read over at once
  FR_RETURN_IF_ERROR(ReadAll(fd.get(), s.storage.get(), payload_bytes, path));
  const uint32_t actual = Crc32c(s.storage.get(), payload_bytes);
  if (actual != crc) {
    return Status::Corruption(where + "checksum mismatch (stored " + std::to_string(crc) + ", computed " +
                              std::to_string(actual) + ")");
  }

  PayloadReader r(s.storage.get(), payload_bytes);
  uint32_t scoring = 0, dtype = 0;
  const bool complete = r.Get(&s.sequence_id) && r.Get(&s.choice) && r.Get(&scoring) && r.Get(&s.weight_version) &&
                        r.Get(&dtype) && r.Get(&s.layout.num_layers) && r.Get(&s.layout.num_kv_heads) &&
                        r.Get(&s.layout.head_dim) && r.Get(&s.layout.block_size) && r.Get(&s.prompt_len) &&
                        r.Get(&s.computed) && r.GetArray(&s.tokens) && r.GetArray(&s.hashes) &&
                        r.GetArray(&s.routing) && r.GetArray(&s.block_versions);
  if (!complete) return Status::Corruption(where + "the payload ends inside its fields");
  if (dtype > 1) return Status::Corruption(where + "unknown KV dtype code " + std::to_string(dtype));
  s.layout.dtype = dtype == 0 ? KvDType::kF32 : KvDType::kBF16;
  s.scoring = scoring != 0;
  const KvLayout& l = s.layout;
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  // Bounded so that sizes computed from them cannot overflow.
  constexpr int64_t kMaxDim = 1 << 16;
  const auto dim_ok = [&](int64_t v) { return v >= 1 && v <= kMaxDim; };
  if (!dim_ok(l.num_layers) || !dim_ok(l.num_kv_heads) || !dim_ok(l.head_dim) || !dim_ok(l.block_size) ||
      s.prompt_len < 0 ||
      s.prompt_len > len || s.computed < 0 || s.computed > len ||
      static_cast<int64_t>(s.hashes.size()) > s.computed / l.block_size ||
      static_cast<int64_t>(s.block_versions.size()) != (s.computed + l.block_size - 1) / l.block_size) {
    return Status::Corruption(where + "fields do not fit together: " + std::to_string(len) + " tokens, prompt_len " +
                              std::to_string(s.prompt_len) + ", computed " + std::to_string(s.computed) + ", " +
                              std::to_string(s.hashes.size()) + " block hashes, " +
                              std::to_string(s.block_versions.size()) + " block versions, layout " +
                              std::to_string(l.num_layers) + " layers x " + std::to_string(l.num_kv_heads) +
                              " heads x " + std::to_string(l.head_dim) + " x block " + std::to_string(l.block_size));
  }
  s.kv = r.Rest();
  int64_t expected = 0;
  if (__builtin_mul_overflow(s.computed, l.TokenBytes(), &expected) || static_cast<uint64_t>(expected) != s.kv.size()) {
    return Status::Corruption(where + "the KV section holds " + std::to_string(s.kv.size()) + " bytes, not " +
                              std::to_string(s.computed) + " computed tokens x " + std::to_string(l.TokenBytes()) +
                              " bytes");
  }
  return s;
}

}  // namespace flashroll::engine
