// The host id ranges of sandboxes' user namespaces: one live sandbox a
// slot, also between managers, and only sane ranges.
#include "sandbox/uid_ranges.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace flashroll::sandbox {
namespace {

class UidRangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/flashroll-uid-ranges-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  UidRangeOptions Options(uint32_t slots = 4) {
    UidRangeOptions options;
    options.base = 200000;
    options.width = 1000;
    options.slots = slots;
    options.lock_dir = dir_ + "/locks";
    options.reserved_files = {};
    return options;
  }

  std::unique_ptr<UidRanges> OpenOrDie(const UidRangeOptions& options) {
    auto ranges = UidRanges::Open(options);
    EXPECT_TRUE(ranges.ok()) << ranges.status().ToString();
    return ranges.ok() ? std::move(*ranges) : nullptr;
  }

  std::string dir_;
};

TEST_F(UidRangesTest, LiveLeasesHoldDisjointSlotsUntilReleased) {
  auto ranges = OpenOrDie(Options(3));
  ASSERT_NE(ranges, nullptr);
  std::vector<UidRangeLease> leases;
  std::set<uint32_t> bases;
  for (int i = 0; i < 3; ++i) {
    auto lease = ranges->Acquire("sandbox-" + std::to_string(i));
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_EQ(lease->range().count, 1000u);
    EXPECT_EQ((lease->range().base - 200000) % 1000, 0u);
    EXPECT_LT(lease->range().base, 200000u + 3 * 1000);
    bases.insert(lease->range().base);
    leases.push_back(std::move(*lease));
  }
  EXPECT_EQ(bases.size(), 3u);
  // The lock file says who holds the slot.
  std::ifstream named(dir_ + "/locks/" + std::to_string(leases[1].range().base));
  std::string owner;
  std::getline(named, owner);
  EXPECT_EQ(owner, "sandbox-1");

  auto full = ranges->Acquire("one-too-many");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted) << full.status().ToString();

  const uint32_t freed = leases[1].range().base;
  leases.erase(leases.begin() + 1);
  auto again = ranges->Acquire("reuse");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->range().base, freed);
}

TEST_F(UidRangesTest, ASlotJustFreedIsTheLastToBeTakenAgain) {
  auto ranges = OpenOrDie(Options(3));
  ASSERT_NE(ranges, nullptr);
  uint32_t first = 0;
  {
    auto lease = ranges->Acquire("a");
    ASSERT_TRUE(lease.ok());
    first = lease->range().base;
  }
  auto second = ranges->Acquire("b");
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->range().base, first);
}

TEST_F(UidRangesTest, TwoManagersNeverShareASlot) {
  // Two allocators on one lock directory stand for two manager processes:
  // flock conflicts between open files, within a process too.
  auto one = OpenOrDie(Options(2));
  auto two = OpenOrDie(Options(2));
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  auto a = one->Acquire("a");
  auto b = two->Acquire("b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->range().base, b->range().base);
  EXPECT_EQ(two->Acquire("c").status().code(), Code::kResourceExhausted);
  // A slot kept after a failed teardown stays out of use.
  a->KeepForever();
  *a = UidRangeLease();
  EXPECT_EQ(two->Acquire("d").status().code(), Code::kResourceExhausted);
  EXPECT_EQ(one->Acquire("e").status().code(), Code::kResourceExhausted);
}

TEST_F(UidRangesTest, ManagersWithShiftedBasesLockTheSameIds) {
  // Slot 1 of the first is slot 0 of the second: the same host ids.
  auto first = Options(2);
  auto shifted = Options(1);
  shifted.base = first.base + first.width;
  auto one = OpenOrDie(first);
  auto two = OpenOrDie(shifted);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  auto a = one->Acquire("a");
  auto b = one->Acquire("b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(two->Acquire("c").status().code(), Code::kResourceExhausted);
}

TEST_F(UidRangesTest, BadRangesAreRefusedNamingTheField) {
  auto options = Options();
  options.base = 1000;
  auto low = UidRanges::Open(options);
  ASSERT_FALSE(low.ok());
  EXPECT_EQ(low.status().code(), Code::kInvalidArgument);
  EXPECT_NE(low.status().message().find("userns_base 1000"), std::string::npos) << low.status().ToString();

  options = Options();
  options.base = 4294000000u;
  options.width = 65536;
  options.slots = 16;
  auto high = UidRanges::Open(options);
  ASSERT_FALSE(high.ok());
  EXPECT_NE(high.status().message().find("past 4294967294"), std::string::npos) << high.status().ToString();

  options = Options();
  options.width = 0;
  EXPECT_EQ(UidRanges::Open(options).status().code(), Code::kInvalidArgument);
  options = Options();
  options.slots = 0;
  EXPECT_EQ(UidRanges::Open(options).status().code(), Code::kInvalidArgument);
  // The last valid id itself is fine.
  options = Options(1);
  options.base = 4294967295u - 1000;
  EXPECT_TRUE(UidRanges::Open(options).ok());
}

TEST_F(UidRangesTest, RangesOverlappingSubordinateIdsAreRefused) {
  const std::string subuid = dir_ + "/subuid";
  std::ofstream(subuid) << "# comment\nalice:100000:65536\nbob:203500:10\n";
  auto options = Options();
  options.reserved_files = {subuid};
  auto overlapping = UidRanges::Open(options);
  ASSERT_FALSE(overlapping.ok());
  EXPECT_EQ(overlapping.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(overlapping.status().message().find(subuid + " line 3 (bob:203500:10)"), std::string::npos)
      << overlapping.status().ToString();
  // Adjacent is not overlapping: alice ends at 165535, bob starts past 4 slots.
  std::ofstream(subuid) << "alice:100000:100000\nbob:204000:10\n";
  EXPECT_TRUE(UidRanges::Open(options).ok());
}

}  // namespace
}  // namespace flashroll::sandbox
