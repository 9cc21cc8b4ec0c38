#include "sandbox/naming.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace flashroll::sandbox {

unsigned long long ProcessStartTime(long pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces; fields are counted after its ')'.
  const char* p = nullptr;
  for (ssize_t i = n - 1; i >= 0; --i) {
    if (buf[i] == ')') {
      p = buf + i + 1;
      break;
    }
  }
  if (p == nullptr) return 0;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

const std::string& OwnNamePrefix() {
  // Recomputed in a forked child: it is another manager, and its sandboxes
  // must not carry (and be protected by) its parent's name. Prefixes are
  // chained and never freed, so a reference handed out stays valid and every
  // string stays reachable; concurrent first calls agree through the CAS.
  struct Prefix {
    std::string text;
    pid_t pid;
    const Prefix* previous;
  };
  static std::atomic<const Prefix*> current{nullptr};
  const pid_t pid = ::getpid();
  const Prefix* seen = current.load();
  while (seen == nullptr || seen->pid != pid) {
    auto* fresh = new Prefix{std::string(kNamePrefix) + std::to_string(pid) + "-" +
                                 std::to_string(ProcessStartTime(pid)) + "-",
                             pid, seen};
    if (current.compare_exchange_strong(seen, fresh)) return fresh->text;
    delete fresh;  // another thread got there first; `seen` now holds its prefix
  }
  return seen->text;
}

std::string NewSandboxName() {
  static std::atomic<uint64_t> sequence{0};
  return OwnNamePrefix() + std::to_string(sequence.fetch_add(1) + 1);
}

bool OwnerAlive(const std::string& name) {
  const std::string prefix = kNamePrefix;
  if (name.rfind(prefix, 0) != 0) return false;
  const char* p = name.c_str() + prefix.size();
  char* end = nullptr;
  const long pid = std::strtol(p, &end, 10);
  if (end == p || *end != '-' || pid <= 0) return false;
  p = end + 1;
  const unsigned long long start = std::strtoull(p, &end, 10);
  if (end == p || *end != '-') return false;
  return ProcessStartTime(pid) == start && start != 0;
}

}  // namespace flashroll::sandbox
