#include "scheduler/trainer_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/http.h"

namespace flashroll {

Result<std::string> LoadOrCreateTokenFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return LoadTokenFile(path);
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IoError("create " + dir.string() + " for " + path + ": " + ec.message());
  }
  unsigned char bytes[16];
  for (size_t got = 0; got < sizeof(bytes);) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "getrandom for " + path);
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) token += {kHex[b >> 4], kHex[b & 15]};
  // O_EXCL: if another process made the file since the check, its token stands.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return LoadTokenFile(path);
  if (fd < 0) return Status::FromErrno(errno, "create " + path);
  const std::string line = token + "\n";
  const ssize_t written = ::write(fd, line.data(), line.size());
  const int write_errno = errno;
  if (::close(fd) != 0 || written != static_cast<ssize_t>(line.size())) {
    ::unlink(path.c_str());
    return Status::FromErrno(written < 0 ? write_errno : EIO, "write " + path);
  }
  return token;
}

}  // namespace flashroll
