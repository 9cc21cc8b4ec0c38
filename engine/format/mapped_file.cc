#include "engine/format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace flashroll::engine {

namespace {

// Closes a file descriptor on scope exit; the mapping keeps its own reference.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  FdCloser closer(fd);
  return FromFd(fd, path);
}

Result<std::unique_ptr<MappedFile>> MappedFile::FromFd(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    static const uint8_t kEmpty[1] = {0};
    return std::unique_ptr<MappedFile>(new MappedFile(path, kEmpty, 0, false));
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) {
    return Status::FromErrno(errno, "mmap " + path + " (" + std::to_string(size) + " bytes)");
  }
  return std::unique_ptr<MappedFile>(
      new MappedFile(path, static_cast<const uint8_t*>(addr), size, true));
}

void MappedFile::Prefault() const {
  if (!mapped_) return;
  // MADV_POPULATE_READ (Linux 5.14) fills the page tables in one call;
  // older kernels get the same effect from a read of every page.
  if (::madvise(const_cast<uint8_t*>(data_), size_, MADV_POPULATE_READ) == 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  uint8_t sum = 0;
  for (size_t i = 0; i < size_; i += page) sum ^= static_cast<const volatile uint8_t*>(data_)[i];
  static_cast<void>(sum);
}

DirectoryFileMapper MapFilesIn(const std::string& dir) {
  return [dir](const std::string& name) { return MappedFile::Open(dir + "/" + name); };
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace flashroll::engine
