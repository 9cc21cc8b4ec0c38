#include "sandbox/net_policy.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "common/log.h"
#include "sandbox/unique_fd.h"
// Generated at build time by sandbox/bpf/bpf.cmake (bpftool gen skeleton):
// the compiled BPF object embedded as bytes, plus typed accessors.
#include "net_policy.skel.h"

namespace flashroll::sandbox {
namespace {

// Twin of struct fr_rule_key and struct fr_cgroup_policy in
// bpf/net_policy.bpf.c; the layout comment lives there.
struct RuleKey {
  uint32_t prefixlen;
  uint32_t cgroup_hi;
  uint32_t cgroup_lo;
  uint8_t protocol;
  uint8_t zero;
  uint16_t port;  // network byte order; 0 = any
  uint8_t addr[16];

  bool operator==(const RuleKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
  bool operator<(const RuleKey& o) const { return std::memcmp(this, &o, sizeof(*this)) < 0; }
};
static_assert(sizeof(RuleKey) == 32, "must match struct fr_rule_key");

struct CgroupPolicy {
  uint32_t flags;
};
constexpr uint32_t kPolicyAllowLoopback = 1;

// Pin names of the links, in NetPolicyAttachment::links_ order.
constexpr const char* kProgramNames[NetPolicyAttachment::kPrograms] = {"connect4", "connect6", "sendmsg4",
                                                                       "sendmsg6", "egress"};

// Bits of a key before the address: cgroup id, protocol, zero byte, port.
constexpr uint32_t kKeyFixedBits = 96;

// Routes libbpf's own messages (verifier logs, attach failures) into our log.
int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char line[1024];
  int n = vsnprintf(line, sizeof(line), format, args);
  std::string_view text(line, n < 0 ? 0 : std::min<size_t>(n, sizeof(line) - 1));
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (level == LIBBPF_WARN) {
    log::Warn("libbpf", {{"msg", text}});
  } else {
    log::Debug("libbpf", {{"msg", text}});
  }
  return 0;
}

std::atomic<bool> g_manager_exists{false};

// Appends the keys for `rule` (one per protocol) to `keys`.
Status AppendRuleKeys(uint64_t cgroup_id, const AllowRule& rule, std::vector<RuleKey>* keys) {
  RuleKey key{};
  key.cgroup_hi = static_cast<uint32_t>(cgroup_id >> 32);
  key.cgroup_lo = static_cast<uint32_t>(cgroup_id);
  key.port = htons(rule.port);
  int address_bits = 0;
  int offset = 0;  // where the rule's address starts in key.addr
  if (rule.family == AF_INET) {
    address_bits = 32;
    offset = 12;
    key.addr[10] = 0xff;  // IPv4-mapped IPv6, ::ffff:a.b.c.d
    key.addr[11] = 0xff;
  } else if (rule.family == AF_INET6) {
    address_bits = 128;
  } else {
    return Status::InvalidArgument("allow rule " + rule.text + ": address family " +
                                   std::to_string(rule.family) + " is neither AF_INET nor AF_INET6");
  }
  if (rule.prefix_len < 0 || rule.prefix_len > address_bits) {
    return Status::InvalidArgument("allow rule " + rule.text + ": prefix length " +
                                   std::to_string(rule.prefix_len) + " out of range 0.." +
                                   std::to_string(address_bits));
  }
  // Host bits are cleared: the trie compares only prefix bits, so two rules
  // differing in host bits would otherwise collide under different keys.
  for (int bit = 0; bit < address_bits; ++bit) {
    if (bit < rule.prefix_len && (rule.address[bit / 8] & (0x80 >> (bit % 8)))) {
      key.addr[offset + bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
    }
  }
  key.prefixlen = kKeyFixedBits + static_cast<uint32_t>(offset * 8 + rule.prefix_len);
  for (uint8_t protocol : {uint8_t{IPPROTO_TCP}, uint8_t{IPPROTO_UDP}}) {
    key.protocol = protocol;
    keys->push_back(key);
  }
  return Status::Ok();
}

Result<uint32_t> ProgramId(const bpf_program* program) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(bpf_program__fd(program), &info, &len) != 0) {
    return Status::FromErrno(
        errno, std::string("bpf_obj_get_info_by_fd program ") + bpf_program__name(program));
  }
  return info.id;
}

Result<uint32_t> MapId(const bpf_map* map) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(bpf_map__fd(map), &info, &len) != 0) {
    return Status::FromErrno(errno, std::string("bpf_obj_get_info_by_fd map ") + bpf_map__name(map));
  }
  return info.id;
}

}  // namespace

// State shared by the manager and its attachments; lives until the last of
// them is gone, so an attachment can outlive the manager.
struct NetPolicyState {
  ~NetPolicyState() {
    net_policy_bpf::destroy(skel);
    g_manager_exists = false;
  }

  // Constant after construction.
  net_policy_bpf* skel = nullptr;
  std::array<bpf_program*, NetPolicyAttachment::kPrograms> programs{};

  std::mutex mu;
  // Map keys written for each policed cgroup. Guarded by mu.
  std::unordered_map<uint64_t, std::vector<RuleKey>> rules_by_cgroup;

  // Deletes a cgroup's entries from both maps. Returns the first failed
  // deletion; continues past it so as little as possible stays behind.
  Status RemoveEntries(uint64_t cgroup_id) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = rules_by_cgroup.find(cgroup_id);
    if (it == rules_by_cgroup.end()) return Status::Ok();
    Status first;
    int rules_fd = bpf_map__fd(skel->maps.fr_rules);
    for (const RuleKey& key : it->second) {
      if (bpf_map_delete_elem(rules_fd, &key) != 0 && errno != ENOENT && first.ok()) {
        first =
            Status::FromErrno(errno, "bpf_map_delete_elem fr_rules cgroup " + std::to_string(cgroup_id));
      }
    }
    if (bpf_map_delete_elem(bpf_map__fd(skel->maps.fr_cgroups), &cgroup_id) != 0 && errno != ENOENT &&
        first.ok()) {
      first =
          Status::FromErrno(errno, "bpf_map_delete_elem fr_cgroups cgroup " + std::to_string(cgroup_id));
    }
    rules_by_cgroup.erase(it);
    return first;
  }
};

Result<uint64_t> CgroupV2Id(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  struct statfs fs;
  if (fstatfs(fd.get(), &fs) != 0) return Status::FromErrno(errno, "fstatfs " + path);
  if (fs.f_type != CGROUP2_SUPER_MAGIC) {
    return Status::InvalidArgument(path + " is not on a cgroup v2 file system");
  }
  // The kernfs file handle of a cgroup directory is its 64-bit cgroup id.
  alignas(file_handle) unsigned char buffer[sizeof(file_handle) + sizeof(uint64_t)] = {};
  auto* handle = reinterpret_cast<file_handle*>(buffer);
  handle->handle_bytes = sizeof(uint64_t);
  int mount_id = 0;
  if (name_to_handle_at(fd.get(), "", handle, &mount_id, AT_EMPTY_PATH) != 0) {
    return Status::FromErrno(errno, "name_to_handle_at " + path);
  }
  uint64_t id = 0;
  std::memcpy(&id, buffer + sizeof(file_handle), sizeof(id));
  return id;
}

NetPolicyAttachment::NetPolicyAttachment(NetPolicyAttachment&& other) noexcept
    : state_(std::move(other.state_)),
      cgroup_id_(other.cgroup_id_),
      links_(other.links_),
      pin_dir_(std::move(other.pin_dir_)) {
  other.cgroup_id_ = 0;
  other.links_.fill(nullptr);
  other.pin_dir_.clear();
}

NetPolicyAttachment& NetPolicyAttachment::operator=(NetPolicyAttachment&& other) noexcept {
  if (this != &other) {
    Status status = Detach();
    if (!status.ok()) log::Warn("net policy detach failed", {{"error", status.ToString()}});
    state_ = std::move(other.state_);
    cgroup_id_ = other.cgroup_id_;
    links_ = other.links_;
    pin_dir_ = std::move(other.pin_dir_);
    other.cgroup_id_ = 0;
    other.links_.fill(nullptr);
    other.pin_dir_.clear();
  }
  return *this;
}

NetPolicyAttachment::~NetPolicyAttachment() {
  Status status = Detach();
  if (!status.ok()) log::Warn("net policy detach failed", {{"error", status.ToString()}});
}

void NetPolicyAttachment::Abandon() {
  for (bpf_link*& link : links_) {
    if (link == nullptr) continue;
    bpf_link__disconnect(link);  // destroy then only closes our descriptor
    bpf_link__destroy(link);
    link = nullptr;
  }
  pin_dir_.clear();
  state_.reset();
  cgroup_id_ = 0;
}

Status NetPolicyAttachment::Detach() {
  if (state_ == nullptr) return Status::Ok();
  // Links first, so no program runs for the cgroup once its entries are gone
  // (it would deny, which is safe, but the order keeps that moot). A pinned
  // link outlives our descriptor: detach it from the cgroup explicitly, and
  // unlink its pin so that it is freed.
  Status first;
  for (int i = 0; i < kPrograms; ++i) {
    bpf_link*& link = links_[i];
    if (link == nullptr) continue;
    if (!pin_dir_.empty()) {
      if (bpf_link__detach(link) != 0 && errno != ENOLINK && first.ok()) {
        first = Status::FromErrno(errno, std::string("detach BPF link ") + kProgramNames[i] + " pinned in " + pin_dir_);
      }
      if (bpf_link__pin_path(link) != nullptr && bpf_link__unpin(link) != 0 && errno != ENOENT && first.ok()) {
        first = Status::FromErrno(errno, std::string("unpin BPF link ") + kProgramNames[i] + " in " + pin_dir_);
      }
    }
    bpf_link__destroy(link);
    link = nullptr;
  }
  if (!pin_dir_.empty()) {
    if (::rmdir(pin_dir_.c_str()) != 0 && errno != ENOENT && first.ok()) {
      first = Status::FromErrno(errno, "rmdir " + pin_dir_);
    }
    pin_dir_.clear();
  }
  Status removed = state_->RemoveEntries(cgroup_id_);
  if (first.ok()) first = removed;
  state_.reset();
  cgroup_id_ = 0;
  return first;
}

NetPolicyManager::NetPolicyManager(std::shared_ptr<NetPolicyState> state, KernelIds ids)
    : state_(std::move(state)), ids_(ids) {}

NetPolicyManager::~NetPolicyManager() = default;

Result<std::unique_ptr<NetPolicyManager>> NetPolicyManager::Create() {
  if (g_manager_exists.exchange(true)) {
    return Status::AlreadyExists("a NetPolicyManager already exists in this process; share it");
  }
  libbpf_set_print(LibbpfPrint);
  auto state = std::make_shared<NetPolicyState>();  // resets g_manager_exists when gone
  state->skel = net_policy_bpf::open_and_load();
  if (state->skel == nullptr) {
    return Status::FromErrno(errno, "load BPF object net_policy.bpf.o (bpf_object__load)");
  }
  net_policy_bpf* skel = state->skel;
  state->programs = {skel->progs.fr_connect4, skel->progs.fr_connect6, skel->progs.fr_sendmsg4,
                     skel->progs.fr_sendmsg6, skel->progs.fr_egress};
  KernelIds ids;
  for (int i = 0; i < NetPolicyAttachment::kPrograms; ++i) {
    FR_ASSIGN_OR_RETURN(ids.programs[i], ProgramId(state->programs[i]));
  }
  FR_ASSIGN_OR_RETURN(ids.rules_map, MapId(skel->maps.fr_rules));
  FR_ASSIGN_OR_RETURN(ids.cgroups_map, MapId(skel->maps.fr_cgroups));
  return std::unique_ptr<NetPolicyManager>(new NetPolicyManager(std::move(state), ids));
}

Result<NetPolicyManager*> NetPolicyManager::Shared() {
  // Deliberately never destroyed: attachments of sandboxes destroyed late
  // in exit must not find the programs gone.
  static Result<std::unique_ptr<NetPolicyManager>>* const shared =
      new Result<std::unique_ptr<NetPolicyManager>>(Create());
  if (!shared->ok()) return shared->status();
  return shared->value().get();
}

Result<NetPolicyAttachment> NetPolicyManager::Attach(const std::string& cgroup_dir, const NetPolicy& policy,
                                                     const std::string& pin_dir) {
  if (policy.allow.size() > kMaxRulesPerSandbox) {
    return Status::InvalidArgument("allow: " + std::to_string(policy.allow.size()) + " rules, more than the " +
                                   std::to_string(kMaxRulesPerSandbox) +
                                   " one sandbox may have (every sandbox's rules share one map)");
  }
  FR_ASSIGN_OR_RETURN(uint64_t cgroup_id, CgroupV2Id(cgroup_dir));
  std::vector<RuleKey> keys;
  for (const AllowRule& rule : policy.allow) {
    FR_RETURN_IF_ERROR(AppendRuleKeys(cgroup_id, rule, &keys));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

  // From here on, the handle owns whatever has been written or linked, and
  // its destructor undoes it on any early return (after `lock` is released:
  // locals are destroyed innermost first).
  NetPolicyAttachment attachment;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->rules_by_cgroup.count(cgroup_id) != 0) {
      return Status::AlreadyExists("cgroup " + cgroup_dir + " already has a network policy");
    }
    state_->rules_by_cgroup[cgroup_id] = keys;
    attachment.state_ = state_;
    attachment.cgroup_id_ = cgroup_id;
    // Rules and settings go in before any program is linked, so a policed
    // cgroup never runs with a partial rule set.
    int rules_fd = bpf_map__fd(state_->skel->maps.fr_rules);
    uint32_t one = 1;
    for (const RuleKey& key : keys) {
      if (bpf_map_update_elem(rules_fd, &key, &one, BPF_ANY) != 0) {
        return Status::FromErrno(errno, "bpf_map_update_elem fr_rules for " + cgroup_dir);
      }
    }
    CgroupPolicy settings{policy.allow_loopback ? kPolicyAllowLoopback : 0};
    if (bpf_map_update_elem(bpf_map__fd(state_->skel->maps.fr_cgroups), &cgroup_id, &settings,
                            BPF_NOEXIST) != 0) {
      return Status::FromErrno(errno, "bpf_map_update_elem fr_cgroups for " + cgroup_dir);
    }
  }

  UniqueFd cgroup_fd(open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cgroup_fd.valid()) return Status::FromErrno(errno, "open " + cgroup_dir);
  for (int i = 0; i < NetPolicyAttachment::kPrograms; ++i) {
    bpf_link* link = bpf_program__attach_cgroup(state_->programs[i], cgroup_fd.get());
    if (link == nullptr) {
      return Status::FromErrno(errno, std::string("attach BPF program ") +
                                          bpf_program__name(state_->programs[i]) + " to cgroup " +
                                          cgroup_dir);
    }
    attachment.links_[i] = link;
  }
  if (pin_dir.empty()) return attachment;
  if (::mkdir(pin_dir.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir " + pin_dir);
  attachment.pin_dir_ = pin_dir;
  for (int i = 0; i < NetPolicyAttachment::kPrograms; ++i) {
    const std::string path = pin_dir + "/" + kProgramNames[i];
    if (bpf_link__pin(attachment.links_[i], path.c_str()) != 0) {
      return Status::FromErrno(errno, "pin BPF link of " + std::string(bpf_program__name(state_->programs[i])) +
                                          " at " + path);
    }
  }
  return attachment;
}

}  // namespace flashroll::sandbox
