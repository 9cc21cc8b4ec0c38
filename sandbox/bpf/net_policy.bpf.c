// Flashroll per-sandbox egress policy, enforced in the kernel.
//
// Five programs share two maps and are attached to every policed sandbox's
// cgroup v2 directory:
//   fr_connect4/6  cgroup/connect4|6   TCP and UDP connect()
//   fr_sendmsg4/6  cgroup/sendmsg4|6   UDP sendto()/sendmsg() with an address
//   fr_egress      cgroup_skb/egress   every IP packet a sandbox socket sends:
//                                      raw and ICMP sockets, connected UDP,
//                                      anything the hooks above do not see
// A cgroup with no entry in fr_cgroups is denied everything (fail closed:
// e.g. a cgroup created below a sandbox's own). Allow rules live in one LPM
// trie, fr_rules; see struct fr_rule_key for why the layout is what it is.
// The user-space half and the key layout's twin are in sandbox/net_policy.cc.
#include <linux/bpf.h>
#include <linux/in.h>

// libbpf's BPF-side headers use the kernel types <linux/bpf.h> defines.
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define FR_LOOPBACK_IFINDEX 1  // "lo" is ifindex 1 in every network namespace
#define FR_POLICY_ALLOW_LOOPBACK 1u

// One allow rule, and the lookup key built from a destination.
// The LPM trie matches the longest bit prefix of the bytes after prefixlen,
// first byte first. Every stored rule fixes the cgroup id, protocol and port
// (96 bits) and then as many address bits as its CIDR has, so a lookup
// matches only rules of that cgroup, protocol and port whose range holds the
// address. Port 0 stands for "any port": a lookup is tried with the real port
// and then with 0. IPv4 is stored as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one
// trie serves both families and an IPv4 rule also covers a dual-stack
// socket's mapped destination. All fields are naturally aligned because the
// verifier rejects misaligned stack access.
struct fr_rule_key {
  __u32 prefixlen;
  __u32 cgroup_hi;
  __u32 cgroup_lo;
  __u8 protocol;  // IPPROTO_TCP or IPPROTO_UDP
  __u8 zero;
  __u16 port;     // network byte order; 0 = any port
  __u8 addr[16];  // network byte order
};

struct fr_cgroup_policy {
  __u32 flags;  // FR_POLICY_*
};

struct {
  __uint(type, BPF_MAP_TYPE_LPM_TRIE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 262144);
  __type(key, struct fr_rule_key);
  __type(value, __u32);
} fr_rules SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 65536);
  __type(key, __u64);
  __type(value, struct fr_cgroup_policy);
} fr_cgroups SEC(".maps");

static __always_inline int rule_allows(__u64 cgroup_id, __u8 protocol, __u16 port, const __u8 addr[16]) {
  struct fr_rule_key key = {};
  key.prefixlen = 96 + 128;
  key.cgroup_hi = (__u32)(cgroup_id >> 32);
  key.cgroup_lo = (__u32)cgroup_id;
  key.protocol = protocol;
  key.port = port;
  __builtin_memcpy(key.addr, addr, 16);
  if (bpf_map_lookup_elem(&fr_rules, &key)) return 1;
  key.port = 0;
  return bpf_map_lookup_elem(&fr_rules, &key) != 0;
}

static __always_inline void map_ipv4(__u32 ip4, __u8 addr[16]) {
  __builtin_memset(addr, 0, 10);
  addr[10] = 0xff;
  addr[11] = 0xff;
  __builtin_memcpy(addr + 12, &ip4, 4);
}

static __always_inline int is_loopback4(__u32 ip4) {
  // 127.0.0.0/8 and 0.0.0.0 (which the kernel routes to the local host).
  __u32 host = bpf_ntohl(ip4);
  return (host >> 24) == 127 || host == 0;
}

static __always_inline int is_loopback6(const __u32 ip6[4]) {
  if (ip6[0] != 0 || ip6[1] != 0) return 0;
  if (ip6[2] == 0) return ip6[3] == 0 || ip6[3] == bpf_htonl(1);  // :: and ::1
  if (ip6[2] == bpf_htonl(0xffff)) return is_loopback4(ip6[3]);   // ::ffff:a.b.c.d
  return 0;
}

static __always_inline const struct fr_cgroup_policy* policy_of(__u64 cgroup_id) {
  return bpf_map_lookup_elem(&fr_cgroups, &cgroup_id);
}

static __always_inline int check_sock_addr4(struct bpf_sock_addr* ctx) {
  __u64 cgroup_id = bpf_get_current_cgroup_id();
  const struct fr_cgroup_policy* policy = policy_of(cgroup_id);
  if (!policy) return 0;
  __u32 ip4 = ctx->user_ip4;
  if ((policy->flags & FR_POLICY_ALLOW_LOOPBACK) && is_loopback4(ip4)) return 1;
  __u32 protocol = ctx->protocol;
  if (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) return 0;
  __u8 addr[16];
  map_ipv4(ip4, addr);
  return rule_allows(cgroup_id, (__u8)protocol, (__u16)ctx->user_port, addr);
}

static __always_inline int check_sock_addr6(struct bpf_sock_addr* ctx) {
  __u64 cgroup_id = bpf_get_current_cgroup_id();
  const struct fr_cgroup_policy* policy = policy_of(cgroup_id);
  if (!policy) return 0;
  __u32 ip6[4];
  ip6[0] = ctx->user_ip6[0];
  ip6[1] = ctx->user_ip6[1];
  ip6[2] = ctx->user_ip6[2];
  ip6[3] = ctx->user_ip6[3];
  if ((policy->flags & FR_POLICY_ALLOW_LOOPBACK) && is_loopback6(ip6)) return 1;
  __u32 protocol = ctx->protocol;
  if (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) return 0;
  __u8 addr[16];
  __builtin_memcpy(addr, ip6, 16);
  return rule_allows(cgroup_id, (__u8)protocol, (__u16)ctx->user_port, addr);
}

SEC("cgroup/connect4")
int fr_connect4(struct bpf_sock_addr* ctx) { return check_sock_addr4(ctx); }

SEC("cgroup/connect6")
int fr_connect6(struct bpf_sock_addr* ctx) { return check_sock_addr6(ctx); }

SEC("cgroup/sendmsg4")
int fr_sendmsg4(struct bpf_sock_addr* ctx) { return check_sock_addr4(ctx); }

SEC("cgroup/sendmsg6")
int fr_sendmsg6(struct bpf_sock_addr* ctx) { return check_sock_addr6(ctx); }

// Minimal header views; only the fields read here.
struct fr_ipv4_header {
  __u8 version_ihl;
  __u8 tos;
  __u16 total_length;
  __u16 id;
  __u16 fragment;  // flags and offset, network byte order
  __u8 ttl;
  __u8 protocol;
  __u16 checksum;
  __u32 source;
  __u32 destination;
};

struct fr_ipv6_header {
  __u32 version_class_flow;
  __u16 payload_length;
  __u8 next_header;
  __u8 hop_limit;
  __u8 source[16];
  __u8 destination[16];
};

struct fr_ports {
  __u16 source;
  __u16 destination;
};

#define FR_ETH_P_IP 0x0800
#define FR_ETH_P_IPV6 0x86DD
#define FR_IP_FRAGMENT_OFFSET 0x1fff

SEC("cgroup_skb/egress")
int fr_egress(struct __sk_buff* skb) {
  __u64 cgroup_id = bpf_skb_cgroup_id(skb);
  const struct fr_cgroup_policy* policy = policy_of(cgroup_id);
  if (!policy) return 0;
  if ((policy->flags & FR_POLICY_ALLOW_LOOPBACK) && skb->ifindex == FR_LOOPBACK_IFINDEX) return 1;

  __u8 addr[16];
  __u8 protocol;
  __u32 l4_offset;
  if (skb->protocol == bpf_htons(FR_ETH_P_IP)) {
    struct fr_ipv4_header ip;
    if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)) < 0) return 0;
    // A non-first fragment carries no ports to check.
    if (ip.fragment & bpf_htons(FR_IP_FRAGMENT_OFFSET)) return 0;
    protocol = ip.protocol;
    l4_offset = (ip.version_ihl & 0x0f) * 4;
    if (l4_offset < sizeof(ip)) return 0;  // malformed (a hand-built raw packet)
    map_ipv4(ip.destination, addr);
  } else if (skb->protocol == bpf_htons(FR_ETH_P_IPV6)) {
    struct fr_ipv6_header ip6;
    if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)) < 0) return 0;
    // Extension headers are not walked: a packet that needs them is denied.
    protocol = ip6.next_header;
    l4_offset = sizeof(ip6);
    __builtin_memcpy(addr, ip6.destination, 16);
  } else {
    return 0;
  }
  if (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) return 0;
  struct fr_ports ports;
  if (bpf_skb_load_bytes(skb, l4_offset, &ports, sizeof(ports)) < 0) return 0;
  return rule_allows(cgroup_id, protocol, ports.destination, addr);
}

char LICENSE[] SEC("license") = "GPL";
