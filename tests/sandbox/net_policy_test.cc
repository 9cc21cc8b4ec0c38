#include "sandbox/net_policy.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace flashroll::sandbox {
namespace {

// Where this machine's cgroup v2 hierarchy is mounted: the first cgroup2
// entry of /proc/self/mounts (/sys/fs/cgroup, or /sys/fs/cgroup/unified in
// hybrid mode). Without one, mounts it at /run/flashroll/cgroup2.
Result<std::string> CgroupV2Root() {
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string source, target, type;
    fields >> source >> target >> type;
    if (type == "cgroup2") return target;
  }
  const char* fallback = "/run/flashroll/cgroup2";
  std::error_code ec;
  std::filesystem::create_directories(fallback, ec);
  if (mount("cgroup2", fallback, "cgroup2", 0, nullptr) != 0) {
    return Status::FromErrno(errno, std::string("mount cgroup2 ") + fallback);
  }
  return std::string(fallback);
}

// A fresh cgroup v2 directory, removed on destruction (once its processes
// have been reaped).
class TestCgroup {
 public:
  explicit TestCgroup(const std::string& root) {
    static int sequence = 0;
    path_ = root + "/flashroll-nettest-" + std::to_string(getpid()) + "-" + std::to_string(sequence++);
    created_ = mkdir(path_.c_str(), 0755) == 0;
  }
  ~TestCgroup() { Remove(); }
  bool created() const { return created_; }
  const std::string& path() const { return path_; }
  // rmdir can briefly see EBUSY while an exited member is being released.
  bool Remove() {
    if (!created_) return true;
    for (int attempt = 0; attempt < 200; ++attempt) {
      if (rmdir(path_.c_str()) == 0) {
        created_ = false;
        return true;
      }
      if (errno != EBUSY) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  std::string path_;
  bool created_ = false;
};

// Runs `body` in a forked child that first moves itself into `cgroup_dir`.
// Returns "" when every check passed, otherwise the first failed check.
std::string InCgroup(const std::string& cgroup_dir, const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    close(fds[0]);
    std::string report;
    int procs = open((cgroup_dir + "/cgroup.procs").c_str(), O_WRONLY);
    if (procs < 0 || write(procs, "0", 1) != 1) {
      report = "join cgroup " + cgroup_dir + ": " + std::strerror(errno);
    } else {
      report = body();
    }
    if (!report.empty() && write(fds[1], report.data(), report.size()) < 0) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) report.append(buf, n);
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    report += " (child status " + std::to_string(wstatus) + ")";
  }
  return report;
}

// A socket address from text, IPv4 or IPv6.
struct Endpoint {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

Endpoint MakeEndpoint(const std::string& ip, uint16_t port) {
  Endpoint e;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&e.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&e.storage);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    e.len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    e.len = sizeof(sockaddr_in6);
  }
  return e;
}

// Binds a socket of `type` to ip:port (port 0: any); returns the fd and sets
// *port to the bound port, or returns -1.
int BindSocket(int type, const std::string& ip, uint16_t* port) {
  Endpoint e = MakeEndpoint(ip, *port);
  int fd = socket(e.family(), type | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, e.addr(), e.len) != 0) return -1;
  if (type == SOCK_STREAM && listen(fd, 64) != 0) return -1;
  socklen_t len = sizeof(e.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&e.storage), &len) != 0) return -1;
  *port = ntohs(e.family() == AF_INET ? reinterpret_cast<sockaddr_in*>(&e.storage)->sin_port
                                      : reinterpret_cast<sockaddr_in6*>(&e.storage)->sin6_port);
  return fd;
}

// The errno of a TCP connect to ip:port from a socket of `family`, 0 on success.
int ConnectErrno(const std::string& ip, uint16_t port, int family = 0) {
  Endpoint e = MakeEndpoint(ip, port);
  int fd = socket(family ? family : e.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int err = connect(fd, e.addr(), e.len) == 0 ? 0 : errno;
  close(fd);
  return err;
}

// The errno of a UDP sendto of `payload` to ip:port, 0 on success.
int SendToErrno(const std::string& ip, uint16_t port, const std::string& payload) {
  Endpoint e = MakeEndpoint(ip, port);
  int fd = socket(e.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int err = sendto(fd, payload.data(), payload.size(), 0, e.addr(), e.len) >= 0 ? 0 : errno;
  close(fd);
  return err;
}

// What arrives on a UDP socket within `ms` milliseconds ("" if nothing).
std::string Receive(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return "";
  char buf[256];
  ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  return n > 0 ? std::string(buf, n) : "";
}

std::string Check(const std::string& what, int got, int want) {
  if (got == want) return "";
  return what + ": got " + (got ? std::strerror(got) : "success") + ", want " +
         (want ? std::strerror(want) : "success");
}

AllowRule Rule(const std::string& text) {
  Result<AllowRule> rule = ParseAllowRule(text);
  EXPECT_TRUE(rule.ok()) << rule.status().ToString();
  return rule.ok() ? *rule : AllowRule{};
}

// Layout twin of struct fr_rule_key (sandbox/bpf/net_policy.bpf.c), read
// back to check what the manager left in the map.
struct RuleKeyView {
  uint32_t prefixlen;
  uint32_t cgroup_hi;
  uint32_t cgroup_lo;
  uint8_t protocol;
  uint8_t zero;
  uint16_t port;
  uint8_t addr[16];
};

// Kernel-side counts, found independently of the manager's bookkeeping by
// walking the kernel's link table and the maps. cgroup_id 0 counts all.
struct KernelCounts {
  int links = 0;           // links of our programs
  int rule_entries = 0;    // fr_rules keys
  int cgroup_entries = 0;  // fr_cgroups keys
};

KernelCounts Count(const NetPolicyManager::KernelIds& ids, uint64_t cgroup_id) {
  KernelCounts counts;
  for (uint32_t id = 0; bpf_link_get_next_id(id, &id) == 0;) {
    int fd = bpf_link_get_fd_by_id(id);
    if (fd < 0) continue;  // released meanwhile
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.type == BPF_LINK_TYPE_CGROUP &&
        std::find(ids.programs.begin(), ids.programs.end(), info.prog_id) != ids.programs.end() &&
        (cgroup_id == 0 || info.cgroup.cgroup_id == cgroup_id)) {
      ++counts.links;
    }
    close(fd);
  }
  int rules = bpf_map_get_fd_by_id(ids.rules_map);
  RuleKeyView key{}, next{};
  for (void* prev = nullptr; rules >= 0 && bpf_map_get_next_key(rules, prev, &next) == 0; prev = &key) {
    uint64_t owner = (uint64_t{next.cgroup_hi} << 32) | next.cgroup_lo;
    if (cgroup_id == 0 || owner == cgroup_id) ++counts.rule_entries;
    key = next;
  }
  if (rules >= 0) close(rules);
  int cgroups = bpf_map_get_fd_by_id(ids.cgroups_map);
  uint64_t ckey = 0, cnext = 0;
  for (void* prev = nullptr; cgroups >= 0 && bpf_map_get_next_key(cgroups, prev, &cnext) == 0;
       prev = &ckey) {
    if (cgroup_id == 0 || cnext == cgroup_id) ++counts.cgroup_entries;
    ckey = cnext;
  }
  if (cgroups >= 0) close(cgroups);
  return counts;
}

// The manager, loaded once for the whole test binary (once per process).
NetPolicyManager* SharedManager(std::string* why_not) {
  Result<NetPolicyManager*> manager = NetPolicyManager::Shared();
  if (!manager.ok()) {
    *why_not = manager.status().ToString();
    return nullptr;
  }
  return *manager;
}

class NetPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF and cgroups)";
    std::string why_not;
    manager_ = SharedManager(&why_not);
    if (manager_ == nullptr) GTEST_SKIP() << "no BPF: " << why_not;
    Result<std::string> root = CgroupV2Root();
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    root_ = *root;
  }

  NetPolicyAttachment MustAttach(const TestCgroup& cg, const NetPolicy& policy) {
    Result<NetPolicyAttachment> a = manager_->Attach(cg.path(), policy);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? std::move(a).value() : NetPolicyAttachment();
  }

  NetPolicyManager* manager_ = nullptr;
  std::string root_;
};

TEST_F(NetPolicyTest, TcpOnlyToAllowedPort) {
  uint16_t allowed = 0, denied = 0;
  int l1 = BindSocket(SOCK_STREAM, "127.0.0.1", &allowed);
  int l2 = BindSocket(SOCK_STREAM, "127.0.0.1", &denied);
  ASSERT_GE(l1, 0);
  ASSERT_GE(l2, 0);
  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy policy;
  policy.allow_loopback = false;  // the test runs in the host netns: police 127.0.0.1 too
  policy.allow = {Rule("127.0.0.1:" + std::to_string(allowed))};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  ASSERT_TRUE(attachment.attached());
  std::string report = InCgroup(cg.path(), [&]() -> std::string {
    if (auto r = Check("connect allowed", ConnectErrno("127.0.0.1", allowed), 0); !r.empty()) return r;
    if (auto r = Check("connect other port", ConnectErrno("127.0.0.1", denied), EPERM); !r.empty())
      return r;
    // TCP Fast Open connects from sendto(); the connect hook covers it too.
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    Endpoint e = MakeEndpoint("127.0.0.1", denied);
    int err = sendto(fd, "x", 1, MSG_FASTOPEN, e.addr(), e.len) >= 0 ? 0 : errno;
    close(fd);
    if (auto r = Check("sendto(MSG_FASTOPEN) other port", err, EPERM); !r.empty()) return r;
    // Other addresses are denied, even on the allowed port.
    return Check("connect 192.0.2.1", ConnectErrno("192.0.2.1", allowed), EPERM);
  });
  EXPECT_EQ(report, "");
  // The same connects from outside the cgroup are not policed.
  EXPECT_EQ(ConnectErrno("127.0.0.1", denied), 0);
  close(l1);
  close(l2);
}

TEST_F(NetPolicyTest, UdpSendtoOnlyToAllowedPort) {
  uint16_t allowed = 0, denied = 0;
  int r1 = BindSocket(SOCK_DGRAM, "127.0.0.1", &allowed);
  int r2 = BindSocket(SOCK_DGRAM, "127.0.0.1", &denied);
  ASSERT_GE(r1, 0);
  ASSERT_GE(r2, 0);
  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy policy;
  policy.allow_loopback = false;
  policy.allow = {Rule("127.0.0.1:" + std::to_string(allowed))};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  std::string report = InCgroup(cg.path(), [&]() -> std::string {
    if (auto r = Check("sendto allowed", SendToErrno("127.0.0.1", allowed, "yes"), 0); !r.empty())
      return r;
    if (auto r = Check("sendto other port", SendToErrno("127.0.0.1", denied, "no"), EPERM); !r.empty())
      return r;
    if (auto r = Check("sendto other address", SendToErrno("127.0.0.2", allowed, "no"), EPERM);
        !r.empty())
      return r;
    // A connected UDP socket: connect is checked, and send() without an
    // address is covered by the egress program.
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    Endpoint e = MakeEndpoint("127.0.0.1", denied);
    if (auto r = Check("udp connect other port", connect(fd, e.addr(), e.len) ? errno : 0, EPERM);
        !r.empty())
      return r;
    close(fd);
    return "";
  });
  EXPECT_EQ(report, "");
  EXPECT_EQ(Receive(r1, 1000), "yes");
  EXPECT_EQ(Receive(r2, 100), "");
  close(r1);
  close(r2);
}

TEST_F(NetPolicyTest, CidrRuleAllowsARangeAndAnyPort) {
  uint16_t port = 0, other = 0;
  int in_range = BindSocket(SOCK_STREAM, "127.0.0.5", &port);
  ASSERT_GE(in_range, 0);
  uint16_t same_port = port;
  int out_of_range = BindSocket(SOCK_STREAM, "127.1.0.5", &same_port);
  ASSERT_GE(out_of_range, 0);
  int in_range_other = BindSocket(SOCK_STREAM, "127.0.0.9", &other);
  ASSERT_GE(in_range_other, 0);
  uint16_t anyport = 0;
  int any_port_listener = BindSocket(SOCK_STREAM, "127.2.0.1", &anyport);
  ASSERT_GE(any_port_listener, 0);

  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy policy;
  policy.allow_loopback = false;
  policy.allow = {Rule("127.0.0.77/24:" + std::to_string(port)),  // host bits are ignored
                  Rule("127.2.0.0/16:*")};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  std::string report = InCgroup(cg.path(), [&]() -> std::string {
    if (auto r = Check("127.0.0.5 in /24", ConnectErrno("127.0.0.5", port), 0); !r.empty()) return r;
    if (auto r = Check("127.1.0.5 outside /24", ConnectErrno("127.1.0.5", port), EPERM); !r.empty())
      return r;
    if (auto r = Check("127.0.0.9 other port", ConnectErrno("127.0.0.9", other), EPERM); !r.empty())
      return r;
    return Check("127.2.0.1 any port", ConnectErrno("127.2.0.1", anyport), 0);
  });
  EXPECT_EQ(report, "");
  for (int fd : {in_range, out_of_range, in_range_other, any_port_listener}) close(fd);
}

TEST_F(NetPolicyTest, Ipv6AndMappedIpv4) {
  uint16_t v6port = 0, v4port = 0;
  int l6 = BindSocket(SOCK_STREAM, "::1", &v6port);
  if (l6 < 0) GTEST_SKIP() << "no IPv6 loopback";
  int l4 = BindSocket(SOCK_STREAM, "127.0.0.1", &v4port);
  ASSERT_GE(l4, 0);
  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy policy;
  policy.allow_loopback = false;
  policy.allow = {Rule("::1/128:" + std::to_string(v6port)),
                  Rule("127.0.0.1:" + std::to_string(v4port))};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  std::string report = InCgroup(cg.path(), [&]() -> std::string {
    if (auto r = Check("[::1] allowed", ConnectErrno("::1", v6port), 0); !r.empty()) return r;
    if (auto r = Check("[::1] other port", ConnectErrno("::1", v4port), EPERM); !r.empty()) return r;
    // A dual-stack IPv6 socket reaching IPv4 goes through connect6 with a
    // mapped address; the IPv4 rule covers it, and only it.
    if (auto r = Check("mapped allowed", ConnectErrno("::ffff:127.0.0.1", v4port), 0); !r.empty())
      return r;
    if (auto r = Check("mapped other", ConnectErrno("::ffff:127.0.0.1", v6port), EPERM); !r.empty())
      return r;
    return Check("udp6 other", SendToErrno("::1", v4port, "x"), EPERM);
  });
  EXPECT_EQ(report, "");
  close(l6);
  close(l4);
}

// Raw sockets bypass connect/sendmsg; the cgroup_skb egress program stops
// them, except over loopback when the policy allows it.
TEST_F(NetPolicyTest, RawIcmpDeniedUnlessLoopbackAllowed) {
  auto ping = []() -> int {
    int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
    if (fd < 0) return errno;
    icmphdr echo{};
    echo.type = ICMP_ECHO;
    echo.checksum = htons(static_cast<uint16_t>(~(ICMP_ECHO << 8)));
    Endpoint e = MakeEndpoint("127.0.0.1", 0);
    int err = sendto(fd, &echo, sizeof(echo), 0, e.addr(), e.len) >= 0 ? 0 : errno;
    close(fd);
    return err;
  };
  for (bool loopback : {false, true}) {
    TestCgroup cg(root_);
    ASSERT_TRUE(cg.created());
    NetPolicy policy;
    policy.allow_loopback = loopback;
    NetPolicyAttachment attachment = MustAttach(cg, policy);
    std::string report = InCgroup(cg.path(), [&]() -> std::string {
      std::string what = std::string("raw ICMP to 127.0.0.1, allow_loopback=") + (loopback ? "1" : "0");
      if (auto r = Check(what, ping(), loopback ? 0 : EPERM); !r.empty()) return r;
      // Non-loopback destinations stay denied either way.
      return Check("connect 192.0.2.1:80", ConnectErrno("192.0.2.1", 80), EPERM);
    });
    EXPECT_EQ(report, "");
  }
}

// A raw socket with its own IPv4 and UDP headers skips the sendmsg hook; the
// egress program parses the packet and applies the same rules.
TEST_F(NetPolicyTest, HandBuiltUdpPacketsArePolicedByEgress) {
  uint16_t allowed = 0, denied = 0;
  int r1 = BindSocket(SOCK_DGRAM, "127.0.0.1", &allowed);
  int r2 = BindSocket(SOCK_DGRAM, "127.0.0.1", &denied);
  ASSERT_GE(r1, 0);
  ASSERT_GE(r2, 0);
  auto send_raw = [](uint16_t port, const std::string& payload) -> int {
    int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);  // implies IP_HDRINCL
    if (fd < 0) return errno;
    unsigned char packet[64] = {};
    const size_t total = 20 + 8 + payload.size();
    packet[0] = 0x45;  // IPv4, 5-word header
    packet[2] = static_cast<unsigned char>(total >> 8);
    packet[3] = static_cast<unsigned char>(total);
    packet[8] = 64;  // TTL
    packet[9] = IPPROTO_UDP;
    uint32_t loopback = htonl(INADDR_LOOPBACK);
    std::memcpy(packet + 12, &loopback, 4);
    std::memcpy(packet + 16, &loopback, 4);
    uint16_t source = htons(40000), destination = htons(port), length = htons(8 + payload.size());
    std::memcpy(packet + 20, &source, 2);
    std::memcpy(packet + 22, &destination, 2);
    std::memcpy(packet + 24, &length, 2);  // UDP checksum 0: none
    std::memcpy(packet + 28, payload.data(), payload.size());
    Endpoint e = MakeEndpoint("127.0.0.1", 0);
    int err = sendto(fd, packet, total, 0, e.addr(), e.len) >= 0 ? 0 : errno;
    close(fd);
    return err;
  };
  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy policy;
  policy.allow_loopback = false;
  policy.allow = {Rule("127.0.0.1:" + std::to_string(allowed))};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  std::string report = InCgroup(cg.path(), [&]() -> std::string {
    if (auto r = Check("raw udp to allowed port", send_raw(allowed, "raw-yes"), 0); !r.empty()) return r;
    return Check("raw udp to other port", send_raw(denied, "raw-no"), EPERM);
  });
  EXPECT_EQ(report, "");
  EXPECT_EQ(Receive(r1, 1000), "raw-yes");
  EXPECT_EQ(Receive(r2, 100), "");
  close(r1);
  close(r2);
}

TEST_F(NetPolicyTest, SandboxesDoNotSeeEachOthersRules) {
  uint16_t port_a = 0, port_b = 0;
  int la = BindSocket(SOCK_STREAM, "127.0.0.1", &port_a);
  int lb = BindSocket(SOCK_STREAM, "127.0.0.1", &port_b);
  ASSERT_GE(la, 0);
  ASSERT_GE(lb, 0);
  TestCgroup cg_a(root_), cg_b(root_);
  ASSERT_TRUE(cg_a.created() && cg_b.created());
  NetPolicy pa, pb;
  pa.allow_loopback = pb.allow_loopback = false;
  pa.allow = {Rule("127.0.0.1:" + std::to_string(port_a))};
  pb.allow = {Rule("127.0.0.1:" + std::to_string(port_b))};
  NetPolicyAttachment a = MustAttach(cg_a, pa);
  NetPolicyAttachment b = MustAttach(cg_b, pb);
  EXPECT_NE(a.cgroup_id(), b.cgroup_id());
  EXPECT_EQ(InCgroup(cg_a.path(),
                     [&]() -> std::string {
                       if (auto r = Check("a->a", ConnectErrno("127.0.0.1", port_a), 0); !r.empty())
                         return r;
                       return Check("a->b", ConnectErrno("127.0.0.1", port_b), EPERM);
                     }),
            "");
  EXPECT_EQ(InCgroup(cg_b.path(),
                     [&]() -> std::string {
                       if (auto r = Check("b->b", ConnectErrno("127.0.0.1", port_b), 0); !r.empty())
                         return r;
                       return Check("b->a", ConnectErrno("127.0.0.1", port_a), EPERM);
                     }),
            "");
  close(la);
  close(lb);
}

// The rule map is shared by every sandbox (issue 27 item 3): an attacker's
// sandbox asking for as many rules as the map holds (131,072: two entries
// each) is refused, and a sandbox made after it still gets its policy.
TEST_F(NetPolicyTest, OneSandboxCannotFillTheSharedRuleMap) {
  TestCgroup attacker_cg(root_), victim_cg(root_);
  ASSERT_TRUE(attacker_cg.created() && victim_cg.created());
  NetPolicy flood;
  flood.allow_loopback = false;
  for (uint32_t i = 0; i < 131072; ++i) {
    AllowRule rule;
    rule.family = AF_INET;
    rule.prefix_len = 32;
    rule.port = 443;
    const uint32_t address = htonl((10u << 24) | i);
    std::memcpy(rule.address, &address, 4);
    rule.text = "flood";
    flood.allow.push_back(rule);
  }
  Result<NetPolicyAttachment> attacker = manager_->Attach(attacker_cg.path(), flood);
  // Held to the end when it got in (without the bound), as an attacker would.
  NetPolicyAttachment held;
  if (attacker.ok()) {
    ADD_FAILURE() << "131072 rules were accepted";
    held = std::move(attacker).value();
  } else {
    EXPECT_EQ(attacker.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(attacker.status().message().rfind("allow: 131072 rules, more than the 1024", 0), 0u)
        << attacker.status().ToString();
    flood.allow.resize(kMaxRulesPerSandbox);
    held = MustAttach(attacker_cg, flood);
    EXPECT_TRUE(held.attached());
  }

  uint16_t port = 0;
  int listener = BindSocket(SOCK_STREAM, "127.0.0.1", &port);
  ASSERT_GE(listener, 0);
  NetPolicy victim;
  victim.allow_loopback = false;
  victim.allow = {Rule("127.0.0.1:" + std::to_string(port))};
  NetPolicyAttachment attachment = MustAttach(victim_cg, victim);
  ASSERT_TRUE(attachment.attached());
  EXPECT_EQ(InCgroup(victim_cg.path(), [&] { return Check("victim connect", ConnectErrno("127.0.0.1", port), 0); }),
            "");
  close(listener);
}

TEST_F(NetPolicyTest, DetachRemovesLinksAndMapEntries) {
  uint16_t port = 0;
  int listener = BindSocket(SOCK_STREAM, "127.0.0.1", &port);
  ASSERT_GE(listener, 0);
  const NetPolicyManager::KernelIds& ids = manager_->kernel_ids();
  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  Result<uint64_t> id = CgroupV2Id(cg.path());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  NetPolicy policy;
  policy.allow_loopback = false;
  policy.allow = {Rule("10.0.0.0/8:443"), Rule("2001:db8::/32:53")};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  EXPECT_EQ(attachment.cgroup_id(), *id);

  KernelCounts during = Count(ids, *id);
  EXPECT_EQ(during.links, 5);
  EXPECT_EQ(during.rule_entries, 4);  // two rules, TCP and UDP each
  EXPECT_EQ(during.cgroup_entries, 1);
  EXPECT_EQ(
      InCgroup(cg.path(), [&] { return Check("attached", ConnectErrno("127.0.0.1", port), EPERM); }),
      "");

  ASSERT_TRUE(attachment.Detach().ok());
  EXPECT_FALSE(attachment.attached());
  // The programs no longer run for the cgroup.
  EXPECT_EQ(InCgroup(cg.path(), [&] { return Check("detached", ConnectErrno("127.0.0.1", port), 0); }),
            "");
  ASSERT_TRUE(cg.Remove());
  KernelCounts after = Count(ids, *id);
  EXPECT_EQ(after.links, 0);
  EXPECT_EQ(after.rule_entries, 0);
  EXPECT_EQ(after.cgroup_entries, 0);
  close(listener);
}

// The launcher may remove a killed sandbox's cgroup before dropping its
// attachment; the links are then already defunct and detach still cleans up.
TEST_F(NetPolicyTest, DetachAfterCgroupRemoval) {
  const NetPolicyManager::KernelIds& ids = manager_->kernel_ids();
  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy policy;
  policy.allow = {Rule("10.0.0.0/8:443")};
  NetPolicyAttachment attachment = MustAttach(cg, policy);
  uint64_t id = attachment.cgroup_id();
  ASSERT_TRUE(cg.Remove());
  ASSERT_TRUE(attachment.Detach().ok());
  KernelCounts after = Count(ids, id);
  EXPECT_EQ(after.links, 0);
  EXPECT_EQ(after.rule_entries, 0);
  EXPECT_EQ(after.cgroup_entries, 0);
}

TEST_F(NetPolicyTest, AttachFailuresLeaveNothingBehind) {
  const NetPolicyManager::KernelIds& ids = manager_->kernel_ids();
  KernelCounts before = Count(ids, 0);

  Result<NetPolicyAttachment> not_cgroup = manager_->Attach("/tmp", NetPolicy{});
  ASSERT_FALSE(not_cgroup.ok());
  EXPECT_EQ(not_cgroup.status().code(), Code::kInvalidArgument) << not_cgroup.status().ToString();

  TestCgroup cg(root_);
  ASSERT_TRUE(cg.created());
  NetPolicy bad;
  AllowRule wide = Rule("10.0.0.0/8:1");
  wide.prefix_len = 33;
  bad.allow = {Rule("10.0.0.0/8:2"), wide};
  Result<NetPolicyAttachment> bad_prefix = manager_->Attach(cg.path(), bad);
  ASSERT_FALSE(bad_prefix.ok());
  EXPECT_EQ(bad_prefix.status().code(), Code::kInvalidArgument) << bad_prefix.status().ToString();

  NetPolicyAttachment first = MustAttach(cg, NetPolicy{});
  Result<NetPolicyAttachment> second = manager_->Attach(cg.path(), NetPolicy{});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(Count(ids, first.cgroup_id()).links, 5);  // the first is intact

  Result<std::unique_ptr<NetPolicyManager>> another = NetPolicyManager::Create();
  ASSERT_FALSE(another.ok());
  EXPECT_EQ(another.status().code(), Code::kAlreadyExists);

  ASSERT_TRUE(first.Detach().ok());
  KernelCounts after = Count(ids, 0);
  EXPECT_EQ(after.links, before.links);
  EXPECT_EQ(after.rule_entries, before.rule_entries);
  EXPECT_EQ(after.cgroup_entries, before.cgroup_entries);
}

// The sandbox lifecycle 1,000 times: a fresh cgroup, attach, detach, remove,
// while another sandbox stays policed throughout (as on a busy node, which
// also keeps the kernel's per-hook static keys on, so the timing is the
// steady-state cost).
TEST_F(NetPolicyTest, AttachDetachThousandTimesLeaksNothing) {
  const NetPolicyManager::KernelIds& ids = manager_->kernel_ids();
  KernelCounts baseline = Count(ids, 0);
  NetPolicy policy;
  policy.allow = {Rule("10.0.0.0/8:443"), Rule("192.168.1.1:53"), Rule("2001:db8::/48:*")};
  TestCgroup neighbour_cg(root_);
  ASSERT_TRUE(neighbour_cg.created());
  NetPolicyAttachment neighbour = MustAttach(neighbour_cg, policy);
  KernelCounts neighbour_counts = Count(ids, neighbour.cgroup_id());
  EXPECT_EQ(neighbour_counts.links, 5);
  EXPECT_EQ(neighbour_counts.rule_entries, 6);

  constexpr int kRounds = 1000;
  std::chrono::nanoseconds attach_time{0}, detach_time{0};
  for (int i = 0; i < kRounds; ++i) {
    TestCgroup cg(root_);
    ASSERT_TRUE(cg.created()) << "round " << i;
    auto t0 = std::chrono::steady_clock::now();
    Result<NetPolicyAttachment> a = manager_->Attach(cg.path(), policy);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(a.ok()) << "round " << i << ": " << a.status().ToString();
    Status detached = a->Detach();
    auto t2 = std::chrono::steady_clock::now();
    ASSERT_TRUE(detached.ok()) << "round " << i << ": " << detached.ToString();
    ASSERT_TRUE(cg.Remove()) << "round " << i;
    attach_time += t1 - t0;
    detach_time += t2 - t1;
  }
  double attach_us = std::chrono::duration<double, std::micro>(attach_time).count() / kRounds;
  double detach_us = std::chrono::duration<double, std::micro>(detach_time).count() / kRounds;
  std::cout << "net policy: attach " << attach_us << " us, detach " << detach_us << " us (mean of "
            << kRounds << ", 3 rules)\n";
  RecordProperty("attach_us", std::to_string(attach_us));
  RecordProperty("detach_us", std::to_string(detach_us));

  KernelCounts still = Count(ids, neighbour.cgroup_id());
  EXPECT_EQ(still.links, neighbour_counts.links);
  EXPECT_EQ(still.rule_entries, neighbour_counts.rule_entries);
  EXPECT_EQ(still.cgroup_entries, 1);
  ASSERT_TRUE(neighbour.Detach().ok());
  KernelCounts after = Count(ids, 0);
  EXPECT_EQ(after.links, baseline.links);
  EXPECT_EQ(after.rule_entries, baseline.rule_entries);
  EXPECT_EQ(after.cgroup_entries, baseline.cgroup_entries);
}

}  // namespace
}  // namespace flashroll::sandbox
