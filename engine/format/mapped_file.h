// MappedFile: a whole file mapped read-only into memory.
//
// Model weights and vocabularies are read through a mapping so that loading
// costs no copy and pages are shared between processes. The mapping lives as
// long as the object; pointers into data() are valid until it is destroyed.
//
// Thread safety: immutable after Open(); any number of threads may read
// data() concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace flashroll::engine {

class MappedFile {
 public:
  // Maps `path` read-only. Returns the mapping, or kNotFound /
  // kPermissionDenied / kIoError naming the path and the failing syscall.
  // An empty file maps to size() == 0 and a non-null data().
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // Maps the regular file open as `fd` (which stays the caller's to close);
  // `path` names it in errors. kInvalidArgument when it is not a regular
  // file, or the fstat/mmap error naming the path.
  static Result<std::unique_ptr<MappedFile>> FromFd(int fd, const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Reads the whole mapping into memory and its page tables now, so that
  // the first use of the data does not stall on page faults (or on disk).
  void Prefault() const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, bool mapped)
      : path_(std::move(path)), data_(data), size_(size), mapped_(mapped) {}

  const std::string path_;
  const uint8_t* const data_;
  const size_t size_;
  const bool mapped_;  // false for an empty file (mmap cannot map 0 bytes)
};

// Maps the file `name` (a bare name such as "config.json") of one model
// directory; kNotFound when the directory has no such file.
using DirectoryFileMapper = std::function<Result<std::unique_ptr<MappedFile>>(const std::string& name)>;

// The mapper of a directory on the filesystem: MappedFile::Open(dir + "/" + name).
DirectoryFileMapper MapFilesIn(const std::string& dir);

}  // namespace flashroll::engine
