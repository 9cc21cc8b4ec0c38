#include "sandbox/veth.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/log.h"
#include "sandbox/kept.h"
#include "sandbox/naming.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

constexpr uint32_t kPoolBase = (10u << 24) | (213u << 16);  // 10.213.0.0, host order
constexpr int kPoolSize = 1 << 14;                           // /30s in a /16

// A netlink request built in place: a header, a fixed part and attributes,
// with nesting.
class NetlinkRequest {
 public:
  NetlinkRequest(uint16_t type, uint16_t flags) {
    header()->nlmsg_type = type;
    header()->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
    header()->nlmsg_len = NLMSG_LENGTH(0);
  }

  template <typename T>
  T* Append(const T& value) {
    return static_cast<T*>(AppendRaw(&value, sizeof(value)));
  }

  void Attr(uint16_t type, const void* data, size_t len) {
    rtattr attr {};
    attr.rta_type = type;
    attr.rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
    AppendRaw(&attr, sizeof(attr));
    AppendRaw(data, len);
  }
  void Attr(uint16_t type, const std::string& text) { Attr(type, text.c_str(), text.size() + 1); }
  template <typename T>
  void AttrValue(uint16_t type, const T& value) {
    Attr(type, &value, sizeof(value));
  }

  // Returns the offset to pass to End().
  size_t Begin(uint16_t type) {
    const size_t offset = header()->nlmsg_len;
    rtattr attr {};
    attr.rta_type = type;
    AppendRaw(&attr, sizeof(attr));
    return offset;
  }
  void End(size_t offset) {
    auto* attr = reinterpret_cast<rtattr*>(buf_ + offset);
    attr->rta_len = static_cast<unsigned short>(header()->nlmsg_len - offset);
  }

  // Sends the request on a fresh NETLINK_ROUTE socket and waits for the
  // acknowledgement. Returns the kernel's errno as a status naming `what`
  // (and in *err_out, when given; 0 on success).
  Status Send(const std::string& what, int* err_out = nullptr) {
    int ignored = 0;
    int& err_code = err_out != nullptr ? *err_out : ignored;
    err_code = 0;
    UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!fd.valid()) return Status::FromErrno(errno, "socket(AF_NETLINK) for " + what);
    sockaddr_nl kernel {};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd.get(), buf_, header()->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
      return Status::FromErrno(errno, "netlink send " + what);
    }
    alignas(nlmsghdr) char reply[4096];
    for (;;) {
      ssize_t n = ::recv(fd.get(), reply, sizeof(reply), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "netlink recv " + what);
      }
      for (auto* h = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(h, static_cast<unsigned>(n));
           h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type != NLMSG_ERROR) continue;
        const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
        err_code = err;
        if (err == 0) return Status::Ok();
        return Status::FromErrno(err, what);
      }
    }
  }

 private:
  nlmsghdr* header() { return reinterpret_cast<nlmsghdr*>(buf_); }

  void* AppendRaw(const void* data, size_t len) {
    const size_t at = NLMSG_ALIGN(header()->nlmsg_len);
    std::memset(buf_ + header()->nlmsg_len, 0, at - header()->nlmsg_len);
    std::memcpy(buf_ + at, data, len);
    header()->nlmsg_len = static_cast<uint32_t>(at + RTA_ALIGN(len));
    return buf_ + at;
  }

  alignas(nlmsghdr) char buf_[1024] = {};
};

Status DeleteLink(int index, const std::string& name) {
  NetlinkRequest request(RTM_DELLINK, 0);
  ifinfomsg info {};
  info.ifi_family = AF_UNSPEC;
  info.ifi_index = index;
  request.Append(info);
  int err = 0;
  Status status = request.Send("RTM_DELLINK " + name + " (index " + std::to_string(index) + ")", &err);
  return err == ENODEV ? Status::Ok() : status;
}

sockaddr_in Inet(uint32_t address) {
  sockaddr_in sin {};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = address;
  return sin;
}

// Sets an IPv4 address and netmask on `name` and brings it up (ioctls on
// the calling process's network namespace). Returns the failed ioctl.
Status ConfigureHostSide(const std::string& name, uint32_t address, uint32_t netmask) {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket(AF_INET) for " + name);
  ifreq ifr {};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  sockaddr_in sin = Inet(address);
  std::memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
  if (::ioctl(fd.get(), SIOCSIFADDR, &ifr) != 0) return Status::FromErrno(errno, "ioctl(SIOCSIFADDR) " + name);
  sin = Inet(netmask);
  std::memcpy(&ifr.ifr_netmask, &sin, sizeof(sin));
  if (::ioctl(fd.get(), SIOCSIFNETMASK, &ifr) != 0) return Status::FromErrno(errno, "ioctl(SIOCSIFNETMASK) " + name);
  if (::ioctl(fd.get(), SIOCGIFFLAGS, &ifr) != 0) return Status::FromErrno(errno, "ioctl(SIOCGIFFLAGS) " + name);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  if (::ioctl(fd.get(), SIOCSIFFLAGS, &ifr) != 0) return Status::FromErrno(errno, "ioctl(SIOCSIFFLAGS) " + name);
  return Status::Ok();
}

std::string ReadAttr(const std::string& name, const char* attr) {
  std::ifstream in("/sys/class/net/" + name + "/" + attr);
  std::string value;
  std::getline(in, value);
  return value;
}

std::string ReadAlias(const std::string& name) { return ReadAttr(name, "ifalias"); }

}  // namespace

Result<Veth> Veth::Create(const std::string& sandbox_name) {
  // Spread managers over the pool so that they rarely probe the same slots.
  static std::atomic<uint32_t> next{static_cast<uint32_t>(::getpid()) * 7919u};
  for (int attempt = 0; attempt < kPoolSize; ++attempt) {
    const int slot = static_cast<int>(next.fetch_add(1) % kPoolSize);
    const std::string host = kVethHostPrefix + std::to_string(slot);
    const std::string peer = kVethPeerPrefix + std::to_string(slot);

    NetlinkRequest request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
    ifinfomsg info {};
    info.ifi_family = AF_UNSPEC;
    request.Append(info);
    request.Attr(IFLA_IFNAME, host);
    // The creating manager's pid, set atomically with the link (the alias
    // below is not accepted at creation): reclaim must not take a pair of a
    // live manager that has not named it yet.
    request.AttrValue(IFLA_GROUP, static_cast<uint32_t>(::getpid()));
    const size_t linkinfo = request.Begin(IFLA_LINKINFO);
    request.Attr(IFLA_INFO_KIND, std::string("veth"));
    const size_t data = request.Begin(IFLA_INFO_DATA);
    const size_t peer_attr = request.Begin(VETH_INFO_PEER);
    request.Append(info);
    request.Attr(IFLA_IFNAME, peer);
    request.End(peer_attr);
    request.End(data);
    request.End(linkinfo);
    int err = 0;
    Status created = request.Send("RTM_NEWLINK veth " + host + "/" + peer, &err);
    if (err == EEXIST) continue;
    FR_RETURN_IF_ERROR(created);

    Veth veth;
    veth.host_name_ = host;
    veth.peer_name_ = peer;
    veth.host_index_ = static_cast<int>(::if_nametoindex(host.c_str()));
    if (veth.host_index_ == 0) {
      const int err = errno;
      NetlinkRequest cleanup(RTM_DELLINK, 0);
      cleanup.Append(info);
      cleanup.Attr(IFLA_IFNAME, host);
      (void)cleanup.Send("RTM_DELLINK " + host);
      return Status::FromErrno(err, "if_nametoindex " + host);
    }
    NetlinkRequest alias(RTM_NEWLINK, 0);
    ifinfomsg target {};
    target.ifi_family = AF_UNSPEC;
    target.ifi_index = veth.host_index_;
    alias.Append(target);
    alias.Attr(IFLA_IFALIAS, sandbox_name.c_str(), sandbox_name.size());
    FR_RETURN_IF_ERROR(alias.Send("RTM_NEWLINK ifalias " + host));
    const uint32_t net = kPoolBase + static_cast<uint32_t>(slot) * 4;
    veth.child_.enabled = true;
    veth.child_.gateway = htonl(net + 1);
    veth.child_.address = htonl(net + 2);
    veth.child_.netmask = htonl(0xfffffffcu);
    FR_RETURN_IF_ERROR(ConfigureHostSide(host, veth.child_.gateway, veth.child_.netmask));
    return veth;
  }
  return Status::ResourceExhausted("veth: all " + std::to_string(kPoolSize) + " /30s of 10.213.0.0/16 are in use");
}

Veth::Veth(Veth&& other) noexcept
    : host_name_(std::move(other.host_name_)),
      peer_name_(std::move(other.peer_name_)),
      host_index_(other.host_index_),
      child_(other.child_) {
  other.host_index_ = 0;
}

Veth& Veth::operator=(Veth&& other) noexcept {
  if (this != &other) {
    if (Status removed = Remove(); !removed.ok()) log::Warn("veth remove failed", {{"error", removed.ToString()}});
    host_name_ = std::move(other.host_name_);
    peer_name_ = std::move(other.peer_name_);
    host_index_ = other.host_index_;
    child_ = other.child_;
    other.host_index_ = 0;
  }
  return *this;
}

Veth::~Veth() {
  if (Status removed = Remove(); !removed.ok()) log::Warn("veth remove failed", {{"error", removed.ToString()}});
}

Status Veth::MoveIntoNetns(pid_t pid) {
  const int peer_index = static_cast<int>(::if_nametoindex(peer_name_.c_str()));
  if (peer_index == 0) return Status::FromErrno(errno, "if_nametoindex " + peer_name_);
  NetlinkRequest request(RTM_NEWLINK, 0);
  ifinfomsg info {};
  info.ifi_family = AF_UNSPEC;
  info.ifi_index = peer_index;
  request.Append(info);
  request.AttrValue(IFLA_NET_NS_PID, static_cast<uint32_t>(pid));
  request.Attr(IFLA_IFNAME, std::string("eth0"));
  return request.Send("RTM_NEWLINK move " + peer_name_ + " into the netns of pid " + std::to_string(pid) +
                      " as eth0");
}

Status Veth::Remove() {
  if (host_index_ == 0) return Status::Ok();
  const int index = host_index_;
  host_index_ = 0;
  return DeleteLink(index, host_name_);
}

ChildStatus VethChild(const VethChildPlan& plan) {
  if (!plan.enabled) return ChildStatus::Ok();
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ChildStatus::Errno("net", "socket(AF_INET)", "eth0");
  ChildStatus status;
  ifreq ifr {};
  std::memcpy(ifr.ifr_name, "eth0", 5);
  sockaddr_in sin = Inet(plan.address);
  std::memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
  if (::ioctl(fd, SIOCSIFADDR, &ifr) != 0) {
    status = ChildStatus::Errno("net", "ioctl(SIOCSIFADDR)", "eth0");
  } else {
    sin = Inet(plan.netmask);
    std::memcpy(&ifr.ifr_netmask, &sin, sizeof(sin));
    if (::ioctl(fd, SIOCSIFNETMASK, &ifr) != 0) {
      status = ChildStatus::Errno("net", "ioctl(SIOCSIFNETMASK)", "eth0");
    } else if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
      status = ChildStatus::Errno("net", "ioctl(SIOCGIFFLAGS)", "eth0");
    } else {
      ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
      if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) status = ChildStatus::Errno("net", "ioctl(SIOCSIFFLAGS)", "eth0");
    }
  }
  if (status.ok()) {
    rtentry route {};
    sockaddr_in any = Inet(0);
    sockaddr_in gateway = Inet(plan.gateway);
    std::memcpy(&route.rt_dst, &any, sizeof(any));
    std::memcpy(&route.rt_genmask, &any, sizeof(any));
    std::memcpy(&route.rt_gateway, &gateway, sizeof(gateway));
    route.rt_flags = RTF_UP | RTF_GATEWAY;
    char dev[] = "eth0";
    route.rt_dev = dev;
    if (::ioctl(fd, SIOCADDRT, &route) != 0) status = ChildStatus::Errno("net", "ioctl(SIOCADDRT)", "default via eth0");
  }
  ::close(fd);
  return status;
}

std::vector<std::string> ListVeths() {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/sys/class/net");
  if (dir == nullptr) return names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kVethHostPrefix, 0) == 0 || name.rfind(kVethPeerPrefix, 0) == 0) names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

Result<std::vector<std::string>> ReclaimVeths() {
  std::vector<std::string> removed;
  for (const std::string& name : ListVeths()) {
    if (name.rfind(kVethHostPrefix, 0) != 0) continue;  // a peer goes with its host side
    const std::string owner = ReadAlias(name);
    if (owner.empty()) {
      // Not named yet: its creator's pid is in the group.
      const long creator = std::strtol(ReadAttr(name, "netdev_group").c_str(), nullptr, 10);
      if (creator > 0 && (::kill(static_cast<pid_t>(creator), 0) == 0 || errno == EPERM)) continue;
    } else if (OwnerAlive(owner) || KeptAlive(owner)) {
      continue;
    }
    const int index = static_cast<int>(::if_nametoindex(name.c_str()));
    if (index == 0) continue;  // gone meanwhile
    FR_RETURN_IF_ERROR(DeleteLink(index, name).Wrap("reclaim veth " + name));
    log::Info("sandbox veth reclaimed", {{"interface", name}, {"owner", owner}});
    removed.push_back(name);
  }
  return removed;
}

}  // namespace flashroll::sandbox
