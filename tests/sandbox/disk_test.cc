// The writable layer is on disk (sandbox/disk.h): `disk` bounds it
// independently of `memory`, and nothing of it stays on the host. Needs
// root (skips otherwise).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

class SandboxDiskTest : public SandboxFixture {};

// Writes `mib` MiB of zeros to `path` in 1 MiB writes; prints "ok" or the
// errno name of the write that failed and how many MiB went before it.
std::string WriteProbe(const std::string& path, int mib) {
  return "python3 -c \"\nimport errno, os\nfd = os.open('" + path + "', os.O_WRONLY | os.O_CREAT, 0o644)\nblock = bytes(1 << 20)\n"
         "for i in range(" + std::to_string(mib) + "):\n    try:\n        os.write(fd, block)\n"
         "    except OSError as e:\n        print(errno.errorcode[e.errno], i)\n        raise SystemExit\n"
         "os.fsync(fd)\nprint('ok')\n\"";
}

// What loop device `name` is attached to now; empty when it is detached.
std::string BackingFile(const std::string& name) {
  std::ifstream in("/sys/block/" + name + "/loop/backing_file");
  std::string backing;
  std::getline(in, backing);
  return backing;
}

// The device's disk sequence number, which the kernel advances on every
// attach and detach: a detach that another attach follows at once (free
// loop devices are handed out lowest first) still shows.
std::string DiskSequence(const std::string& name) {
  std::ifstream in("/sys/block/" + name + "/diskseq");
  std::string sequence;
  std::getline(in, sequence);
  return sequence;
}

// The steps: under a 64M memory limit a sandbox writes 160M to
// /var/tmp without being OOM-killed, and the write past its 256M disk fails
// with ENOSPC inside. On the old code (a tmpfs charged to memory) the 160M
// write was OOM-killed at ~62 MiB.
TEST_F(SandboxDiskTest, DiskBoundsTheWritableRootOnDiskNotInMemory) {
  SandboxSpec spec;
  spec.memory_bytes = 64ull << 20;
  spec.disk_bytes = 256ull << 20;
  const std::string id = CreateOrDie(spec);
  ExecResult first = Sh(id, WriteProbe("/var/tmp/first", 160), std::chrono::seconds(60));
  EXPECT_EQ(first.stdout_data, "ok\n") << first.stderr_data;
  EXPECT_FALSE(first.oom_killed);
  EXPECT_EQ(manager_->Info(id)->oom_kills, 0u);
  ExecResult second = Sh(id, WriteProbe("/tmp/second", 200), std::chrono::seconds(60));
  std::istringstream words(second.stdout_data);
  std::string error;
  int written = 0;
  words >> error >> written;
  EXPECT_EQ(error, "ENOSPC") << second.stdout_data << second.stderr_data;
  // The bound is the disk: 160 + what went before ENOSPC stays at most 256
  // (less the filesystem's own metadata).
  EXPECT_GT(160 + written, 230);
  EXPECT_LE(160 + written, 256);
  EXPECT_FALSE(second.oom_killed);
  // Inodes are bounded too: one per 16 KiB.
  ExecResult inodes = Sh(id, "rm -f /var/tmp/first /tmp/second; df -i / | tail -1 | tr -s ' ' | cut -d' ' -f2");
  EXPECT_EQ(inodes.stdout_data, std::to_string((256 << 20) / 16384) + "\n");
  // A loop device of its own, backed by its nameless image. Other tests
  // attach loop devices of their own meanwhile, so this one is followed by
  // name, not by counting.
  const std::string device = manager_->Info(id)->disk_device;
  ASSERT_EQ(device.rfind("/dev/loop", 0), 0u) << device;
  const std::string loop = device.substr(5);
  const std::string backing = BackingFile(loop);
  EXPECT_NE(backing.find("(deleted)"), std::string::npos) << backing;
  const std::string attached = DiskSequence(loop);
  ASSERT_FALSE(attached.empty());
  ASSERT_TRUE(manager_->Destroy(id).ok());
  // The loop device detaches with the sandbox's mount; its image's blocks
  // are freed.
  for (int i = 0; i < 50 && DiskSequence(loop) == attached; ++i) usleep(20000);
  EXPECT_NE(DiskSequence(loop), attached);
}

// Many-file abuse: the inode table ends it, not the host's.
TEST_F(SandboxDiskTest, TheInodeTableBoundsTheNumberOfFiles) {
  SandboxSpec spec;
  spec.disk_bytes = 16ull << 20;  // 1024 inodes
  const std::string id = CreateOrDie(spec);
  ExecResult r = Sh(id, "mkdir /tmp/many && cd /tmp/many && i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done; echo $i");
  EXPECT_GT(std::stoi(r.stdout_data), 900) << r.stdout_data;
  EXPECT_LT(std::stoi(r.stdout_data), 1024);
}

}  // namespace
}  // namespace flashroll::sandbox
