// Start-up reclaim against a fake cgroup backend: what is removed, and how
// often a manager's liveness is looked up.
#include "sandbox/reclaim.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace flashroll::sandbox {
namespace {

class FakeBackend : public CgroupBackend {
 public:
  explicit FakeBackend(std::vector<std::string> names) : names_(std::move(names)) {}
  const char* layout() const override { return "fake"; }
  Result<std::unique_ptr<Cgroup>> Create(const std::string&, const CgroupLimits&) override {
    return Status::Internal("fake: no create");
  }
  Result<std::vector<std::string>> List() override { return names_; }
  Status RemoveLeftover(const std::string& name) override {
    removed.push_back(name);
    return Status::Ok();
  }
  std::vector<std::string> removed;

 private:
  std::vector<std::string> names_;
};

// 1,000 sandboxes of a live manager and two of a dead one: two lookups,
// the dead one's two sandboxes removed.
TEST(ReclaimTest, LooksUpEachManagerOnce) {
  std::vector<std::string> names;
  for (int i = 1; i <= 1000; ++i) names.push_back("fr-100-5000-" + std::to_string(i));
  names.push_back("fr-200-6000-1");
  names.push_back("fr-200-6000-2");
  FakeBackend backend(names);
  std::vector<std::string> asked;
  auto removed = TEST_ReclaimLeftovers(backend, [&asked](const std::string& name) {
    asked.push_back(name);
    return name.rfind("fr-100-5000-", 0) == 0;
  });
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(asked.size(), 2u);
  EXPECT_EQ(backend.removed, (std::vector<std::string>{"fr-200-6000-1", "fr-200-6000-2"}));
}

}  // namespace
}  // namespace flashroll::sandbox
