// Pooled network namespaces: fresh, distinct, with loopback up, and made
// without moving any other thread out of the host's namespace.
#include "sandbox/netns_pool.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

UniqueFd TakeWhenReady(NetnsPool& pool) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    UniqueFd fd = pool.Take();
    if (fd.valid() || std::chrono::steady_clock::now() > deadline) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(NetnsPoolTest, HandsOutDistinctFreshNamespaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const ino_t host = InodeOf("/proc/self/ns/net");
  NetnsPool pool(2);
  UniqueFd a = TakeWhenReady(pool);
  UniqueFd b = TakeWhenReady(pool);
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  struct stat sa {}, sb {};
  ASSERT_EQ(::fstat(a.get(), &sa), 0);
  ASSERT_EQ(::fstat(b.get(), &sb), 0);
  EXPECT_NE(sa.st_ino, host);
  EXPECT_NE(sb.st_ino, host);
  EXPECT_NE(sa.st_ino, sb.st_ino);
  // The pool's thread went back home: this thread and the process are still
  // in the host's namespace.
  EXPECT_EQ(InodeOf("/proc/thread-self/ns/net"), host);
  EXPECT_EQ(InodeOf("/proc/self/ns/net"), host);
}

class NetnsPoolSandboxTest : public SandboxFixture, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandbox tests need root";
    Manager::Options options;
    options.netns_pool = GetParam();
    auto manager = Manager::Open(options);
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(*manager);
  }
};

// With and without the pool, each sandbox has its own namespace holding only
// a working loopback.
TEST_P(NetnsPoolSandboxTest, EverySandboxHasItsOwnLoopbackOnlyNamespace) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the pool fill
  const ino_t host = InodeOf("/proc/self/ns/net");
  std::set<ino_t> seen;
  for (int i = 0; i < 4; ++i) {
    const std::string id = CreateOrDie();
    auto info = manager_->Info(id);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    const ino_t ns = InodeOf("/proc/" + std::to_string(info->init_pid) + "/ns/net");
    EXPECT_NE(ns, host);
    EXPECT_TRUE(seen.insert(ns).second) << "two sandboxes share a network namespace";
    ExecResult r = Sh(id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
                          "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                          "c = socket.create_connection(s.getsockname()); print('loopback ok')\"");
    EXPECT_EQ(r.stdout_data, "lo\nloopback ok\n") << r.stderr_data;
  }
}

INSTANTIATE_TEST_SUITE_P(PoolSizes, NetnsPoolSandboxTest, ::testing::Values(0, 8));

}  // namespace
}  // namespace flashroll::sandbox
