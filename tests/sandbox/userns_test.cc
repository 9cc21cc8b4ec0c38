// User namespaces of a root manager's sandboxes (sandbox/userns.h,
// uid_ranges.h): uid 0 inside is an unprivileged range outside, one a live
// sandbox, and files keep showing their owners through the idmapped layers.
// Needs root (skips otherwise).
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

class SandboxUsernsTest : public SandboxFixture {
 protected:
  SandboxInfo InfoOrDie(const std::string& id) {
    auto info = manager_->Info(id);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? *info : SandboxInfo();
  }
};

// The four ids of a "Uid:" or "Gid:" line of /proc/<pid>/status.
std::vector<uint64_t> StatusIds(pid_t pid, const std::string& key) {
  std::istringstream status(ReadHostFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    std::vector<uint64_t> ids;
    for (uint64_t id; fields >> id;) ids.push_back(id);
    return ids;
  }
  return {};
}

// The fields of a one-line uid_map or gid_map.
std::vector<uint64_t> MapOf(pid_t pid, const char* file) {
  std::istringstream map(ReadHostFile("/proc/" + std::to_string(pid) + "/" + file));
  std::vector<uint64_t> fields;
  for (uint64_t field; map >> field;) fields.push_back(field);
  return fields;
}

TEST_F(SandboxUsernsTest, RootInsideIsAnUnprivilegedRangeOfItsOwnOutside) {
  // Supplementary groups of the host's (root's and shadow's) that the
  // manager holds must not reach the sandbox.
  std::vector<gid_t> saved(static_cast<size_t>(getgroups(0, nullptr)));
  ASSERT_EQ(getgroups(static_cast<int>(saved.size()), saved.data()), static_cast<int>(saved.size()));
  const gid_t host_groups[] = {0, 42};
  ASSERT_EQ(setgroups(2, host_groups), 0);
  const std::string a = CreateOrDie();
  const std::string b = CreateOrDie();
  ASSERT_EQ(setgroups(saved.size(), saved.data()), 0);
  const SandboxInfo info_a = InfoOrDie(a);
  const SandboxInfo info_b = InfoOrDie(b);
  for (const SandboxInfo& info : {info_a, info_b}) {
    SCOPED_TRACE(info.id);
    ASSERT_GE(info.host_uid, 65536u);
    const std::vector<uint64_t> mapped(4, info.host_uid);
    EXPECT_EQ(StatusIds(info.init_pid, "Uid"), mapped);
    EXPECT_EQ(StatusIds(info.init_pid, "Gid"), mapped);
    EXPECT_EQ(MapOf(info.init_pid, "uid_map"), (std::vector<uint64_t>{0, info.host_uid, 65536}));
    EXPECT_EQ(MapOf(info.init_pid, "gid_map"), (std::vector<uint64_t>{0, info.host_uid, 65536}));
    // No supplementary group of the host's root came along.
    EXPECT_EQ(StatusIds(info.init_pid, "Groups"), std::vector<uint64_t>{});
  }
  const uint64_t low = std::min(info_a.host_uid, info_b.host_uid);
  const uint64_t high = std::max(info_a.host_uid, info_b.host_uid);
  EXPECT_GE(high - low, 65536u) << "the two sandboxes' ranges overlap";
  // Inside, it is root, in a namespace whose ids are that range.
  ExecResult r = Sh(a, "id -u; id -g; id -G; cat /proc/self/uid_map");
  std::istringstream lines(r.stdout_data);
  std::string uid, gid, groups;
  std::getline(lines, uid);
  std::getline(lines, gid);
  std::getline(lines, groups);
  EXPECT_EQ(uid, "0") << r.stdout_data << r.stderr_data;
  EXPECT_EQ(gid, "0");
  EXPECT_EQ(groups, "0");
  std::vector<uint64_t> inside;
  for (uint64_t field; lines >> field;) inside.push_back(field);
  EXPECT_EQ(inside, (std::vector<uint64_t>{0, info_a.host_uid, 65536}));
}

TEST_F(SandboxUsernsTest, ARangeIsFreeAgainOnlyOnceItsSandboxIsGone) {
  // A manager of one slot, apart from the default range the others use.
  Manager::Options options;
  options.userns_base = uint32_t{3} << 30;
  options.userns_slots = 1;
  auto manager = Manager::Open(options);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  auto first = (*manager)->Create(SandboxSpec());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*manager)->Info(*first)->host_uid, options.userns_base);
  auto second = (*manager)->Create(SandboxSpec());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kResourceExhausted) << second.status().ToString();
  ASSERT_TRUE((*manager)->Destroy(*first).ok());

  // A create that fails after taking the range gives it back: sysfs cannot
  // be idmapped, so a directory image there fails in the child.
  SandboxSpec unmappable;
  unmappable.image = ImageKind::kDirectory;
  unmappable.image_dir = "/sys/kernel";
  auto failed = (*manager)->Create(unmappable);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("mount_setattr(MOUNT_ATTR_IDMAP) /sys/kernel"), std::string::npos)
      << failed.status().ToString();

  auto again = (*manager)->Create(SandboxSpec());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*manager)->Info(*again)->host_uid, options.userns_base);
}

// Every image kind: the host's root-owned files are root's inside, and what
// the sandbox makes is its range's on the host.
TEST_F(SandboxUsernsTest, FilesShowTheirOwnersInEveryImageKind) {
  char dir[] = "/tmp/flashroll-userns-image-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string image = dir;
  std::filesystem::create_directories(image + "/bin");
  std::filesystem::create_directories(image + "/home/user");
  std::filesystem::copy_file("/bin/busybox", image + "/bin/busybox");
  std::filesystem::create_symlink("busybox", image + "/bin/sh");
  ASSERT_EQ(chown((image + "/home/user").c_str(), 1000, 1000), 0);

  SandboxSpec host;
  SandboxSpec busybox;
  busybox.image = ImageKind::kBusybox;
  SandboxSpec directory;
  directory.image = ImageKind::kDirectory;
  directory.image_dir = image;
  for (const auto& [name, spec, paths] :
       {std::tuple{"host", host, std::string("/usr /usr/bin/ls /etc/passwd /root /lib")},
        std::tuple{"busybox", busybox, std::string("/bin/busybox /etc/passwd")},
        std::tuple{"directory", directory, std::string("/bin/busybox")}}) {
    SCOPED_TRACE(name);
    // / takes no new entries (Landlock grants no write right directly under
    // it), so what the sandbox makes goes beneath its writable trees.
    const bool host_image = spec.image == ImageKind::kHost;
    const std::vector<std::string> made = host_image ? std::vector<std::string>{"/root/made", "/tmp/made"}
                                                     : std::vector<std::string>{"/tmp/made"};
    std::string made_paths;
    for (const std::string& path : made) made_paths += path + " ";
    const std::string id = CreateOrDie(spec);
    ASSERT_FALSE(id.empty());
    // busybox's applets: the directory image has nothing else.
    ExecResult r = Run(id, {"/bin/sh", "-c",
                            "for p in / /tmp /dev /dev/null /dev/shm /proc/1 " + paths +
                                "; do /bin/busybox stat -c %u:%g $p; done | /bin/busybox sort -u; "
                                "/bin/busybox touch " + made_paths});
    EXPECT_EQ(r.stdout_data, "0:0\n") << r.stderr_data;
    const SandboxInfo info = InfoOrDie(id);
    for (const std::string& path : made) {
      struct stat st {};
      ASSERT_EQ(::lstat(("/proc/" + std::to_string(info.init_pid) + "/root" + path).c_str(), &st), 0) << path;
      EXPECT_EQ(st.st_uid, info.host_uid) << path;
      EXPECT_EQ(st.st_gid, info.host_uid) << path;
    }
    if (spec.image == ImageKind::kDirectory) {
      // Other owners keep their ids inside the range.
      EXPECT_EQ(Run(id, {"/bin/busybox", "stat", "-c", "%u:%g", "/home/user"}).stdout_data, "1000:1000\n");
    }
    ASSERT_TRUE(manager_->Destroy(id).ok());
  }
  // The image itself is untouched.
  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_FALSE(std::filesystem::exists(image + "/made"));
  std::filesystem::remove_all(image);
}

// --rw binds are not idmapped (mount.h says why): host files show their
// host owners, and the sandbox writes as its range.
TEST_F(SandboxUsernsTest, AReadWriteBindShowsHostOwnersAndGetsTheRangesFiles) {
  char dir[] = "/tmp/flashroll-userns-rw-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string rw = dir;
  ASSERT_EQ(chmod(rw.c_str(), 0777), 0);
  std::ofstream(rw + "/host-file") << "host\n";
  ASSERT_EQ(chmod((rw + "/host-file").c_str(), 0644), 0);
  SandboxSpec spec;
  spec.rw_paths = {rw};
  const std::string id = CreateOrDie(spec);
  ExecResult r = Sh(id, "stat -c %u " + rw + "/host-file; cat " + rw + "/host-file; (echo x > " + rw +
                            "/host-file) 2>/dev/null || echo refused; echo made > " + rw + "/made; stat -c %u " +
                            rw + "/made");
  // 65534: the host's root is not mapped inside.
  EXPECT_EQ(r.stdout_data, "65534\nhost\nrefused\n0\n") << r.stderr_data;
  struct stat st {};
  ASSERT_EQ(::stat((rw + "/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, InfoOrDie(id).host_uid);
  EXPECT_EQ(ReadHostFile(rw + "/host-file"), "host\n");
  ASSERT_TRUE(manager_->Destroy(id).ok());
  std::filesystem::remove_all(rw);
}

}  // namespace
}  // namespace flashroll::sandbox
