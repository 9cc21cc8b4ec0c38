#include "sandbox/cgroup_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace flashroll::sandbox::cgroupfs {

namespace {

using Clock = std::chrono::steady_clock;

std::string Join(const std::string& dir, const char* file) { return dir + "/" + file; }

}  // namespace

Status WriteFd(int fd, const std::string& value, const std::string& what) {
  const ssize_t n = ::write(fd, value.data(), value.size());
  if (n < 0) return Status::FromErrno(errno, "write '" + value + "' to " + what);
  if (static_cast<size_t>(n) != value.size()) return Status::IoError("short write of '" + value + "' to " + what);
  return Status::Ok();
}

Status Write(const std::string& dir, const char* file, const std::string& value) {
  const std::string path = Join(dir, file);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  return WriteFd(fd.get(), value, path);
}

Result<std::string> Read(const std::string& dir, const char* file) {
  const std::string path = Join(dir, file);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) return Status::FromErrno(errno, "read " + path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<uint64_t> ReadKey(const std::string& dir, const char* file, const char* key) {
  FR_ASSIGN_OR_RETURN(std::string text, Read(dir, file));
  const std::string needle = std::string(key) + " ";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, needle.size(), needle) == 0) {
      return std::strtoull(text.c_str() + pos + needle.size(), nullptr, 10);
    }
    pos = end + 1;
  }
  return Status::NotFound(Join(dir, file) + ": no key '" + key + "'");
}

Status MakeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) return Status::FromErrno(errno, "mkdir " + dir);
  return Status::Ok();
}

Status EnsureDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + dir);
  return Status::Ok();
}

Status RemoveDir(const std::string& dir) {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  auto delay = std::chrono::microseconds(50);
  for (;;) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EBUSY || Clock::now() > deadline) return Status::FromErrno(errno, "rmdir " + dir);
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20000));
  }
}

Result<std::vector<std::string>> ListDirs(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return names;
    return Status::FromErrno(errno, "opendir " + dir);
  }
  while (dirent* entry = ::readdir(d)) {
    if (entry->d_type != DT_DIR) continue;
    std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0) names.push_back(std::move(name));
  }
  ::closedir(d);
  return names;
}

Result<UniqueFd> OpenDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + dir);
  return fd;
}

Status V2Kill(const std::string& dir) { return Write(dir, "cgroup.kill", "1"); }

Status V2SetFrozen(const std::string& dir, bool frozen) {
  FR_RETURN_IF_ERROR(Write(dir, "cgroup.freeze", frozen ? "1" : "0"));
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    FR_ASSIGN_OR_RETURN(uint64_t state, ReadKey(dir, "cgroup.events", "frozen"));
    if ((state == 1) == frozen) return Status::Ok();
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded(dir + ": cgroup.events did not report frozen " + (frozen ? "1" : "0"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status V2WaitEmpty(const std::string& dir, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto populated = ReadKey(dir, "cgroup.events", "populated");
    if (!populated.ok()) {
      if (populated.status().code() == Code::kNotFound) return Status::Ok();  // directory gone
      return populated.status();
    }
    if (*populated == 0) return Status::Ok();
    if (Clock::now() > deadline) return Status::DeadlineExceeded(dir + ": processes still running after kill");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status KillAllListed(const std::string& dir) {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    auto procs = Read(dir, "cgroup.procs");
    if (!procs.ok()) {
      if (procs.status().code() == Code::kNotFound) return Status::Ok();
      return procs.status();
    }
    if (procs->empty()) return Status::Ok();
    const char* p = procs->c_str();
    while (*p != '\0') {
      char* end = nullptr;
      const long pid = std::strtol(p, &end, 10);
      if (end == p) break;
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
      p = end;
      while (*p == '\n') ++p;
    }
    if (Clock::now() > deadline) return Status::DeadlineExceeded(dir + ": processes still running after SIGKILL");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace flashroll::sandbox::cgroupfs
