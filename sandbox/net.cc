#include "sandbox/net.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace flashroll::sandbox {

Status CheckNetParentSide(const SandboxSpec& spec) {
  for (const auto& rule : spec.allow) {
    if (rule.family != AF_INET) {
      return Status::InvalidArgument("--allow " + rule.text + ": the policy network carries IPv4 only");
    }
  }
  return Status::Ok();
}

ChildStatus NetChild() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ChildStatus::Errno("net", "socket(AF_INET)", nullptr);
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  ChildStatus status;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    status = ChildStatus::Errno("net", "ioctl(SIOCGIFFLAGS)", "lo");
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) status = ChildStatus::Errno("net", "ioctl(SIOCSIFFLAGS)", "lo");
  }
  ::close(fd);
  return status;
}

ChildStatus UnprivilegedPortsChild() {
  constexpr char kKnob[] = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
  const int fd = ::open(kKnob, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ChildStatus::Errno("net", "open", kKnob);
  const ChildStatus status = ::write(fd, "0", 1) == 1 ? ChildStatus::Ok() : ChildStatus::Errno("net", "write 0", kKnob);
  ::close(fd);
  return status;
}

ChildStatus JoinNetnsChild(int netns_fd) {
  if (::setns(netns_fd, CLONE_NEWNET) != 0) return ChildStatus::Errno("net", "setns(CLONE_NEWNET)", "pooled namespace");
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
