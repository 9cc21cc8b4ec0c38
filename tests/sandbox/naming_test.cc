#include "sandbox/naming.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace flashroll::sandbox {
namespace {

TEST(SandboxNamingTest, NamesAreUniqueAndCarryThisProcess) {
  const std::string a = NewSandboxName();
  const std::string b = NewSandboxName();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(OwnNamePrefix(), 0), 0u);
  EXPECT_EQ(OwnNamePrefix().rfind("fr-" + std::to_string(getpid()) + "-", 0), 0u);
}

TEST(SandboxNamingTest, OwnerAliveOnlyForLiveManagers) {
  EXPECT_TRUE(OwnerAlive(NewSandboxName()));
  // Same pid, different start time: a recycled pid is not the owner.
  EXPECT_FALSE(OwnerAlive("fr-" + std::to_string(getpid()) + "-1-1"));
  EXPECT_FALSE(OwnerAlive("fr-999999999-5-1"));
  EXPECT_FALSE(OwnerAlive("fr-garbage"));
  EXPECT_FALSE(OwnerAlive("other-1-2-3"));
}

}  // namespace
}  // namespace flashroll::sandbox
