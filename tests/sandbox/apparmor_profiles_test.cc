// AppArmorProfiles: one compiled and loaded profile per distinct spec, shared
// by the sandboxes of that spec and unloaded with the last of them. These
// machines' kernels have no AppArmor, so the backend here compiles each
// profile with the real apparmor_parser (--skip-kernel-load) instead of
// loading it, and records loads and unloads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "sandbox/apparmor.h"
#include "sandbox/apparmor_profile.h"
#include "sandbox/naming.h"

namespace flashroll::sandbox {
namespace {

const std::vector<std::string> kProfileRootEntries = {"bin", "dev", "etc", "proc", "root", "sys", "tmp", "usr"};

struct Recorder {
  std::mutex mu;
  std::vector<std::string> loads, unloads;
  std::set<std::string> live;
  bool compile = true;
  bool twice = false;  // a name loaded while loaded

  AppArmorProfiles::Backend Backend() {
    AppArmorProfiles::Backend backend;
    backend.load = [this](const std::string& name, const std::string& text) {
      if (compile) FR_RETURN_IF_ERROR(RunAppArmorParser(text, /*load=*/false));
      if (text.find("profile " + name + " ") == std::string::npos) {
        return Status::InvalidArgument("the text does not define " + name);
      }
      std::lock_guard<std::mutex> lock(mu);
      loads.push_back(name);
      twice |= !live.insert(name).second;
      return Status::Ok();
    };
    backend.unload = [this](const std::string& name) {
      std::lock_guard<std::mutex> lock(mu);
      unloads.push_back(name);
      live.erase(name);
      return Status::Ok();
    };
    return backend;
  }
};

Result<AppArmorProfiles::Lease> AcquireFor(AppArmorProfiles& profiles, const SandboxSpec& spec) {
  return profiles.Acquire([&](const std::string& name) { return GenerateAppArmorProfile(name, spec, kProfileRootEntries); });
}

TEST(AppArmorProfilesTest, SandboxesOfOneSpecShareOneLoadAndTheLastUnloadsIt) {
  if (access("/usr/sbin/apparmor_parser", X_OK) != 0 && access("/sbin/apparmor_parser", X_OK) != 0) {
    FAIL() << "apparmor_parser not installed (Debian package apparmor): run scripts/install-deps.sh";
  }
  Recorder recorder;
  AppArmorProfiles profiles(recorder.Backend());
  SandboxSpec plain, with_rw;
  with_rw.rw_paths = {"/srv/work"};
  auto a = AcquireFor(profiles, plain);
  auto b = AcquireFor(profiles, plain);
  auto c = AcquireFor(profiles, with_rw);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().ToString() << c.status().ToString();
  EXPECT_EQ(recorder.loads.size(), 2u);
  EXPECT_EQ(a->name(), b->name());
  EXPECT_NE(a->name(), c->name());
  // Named for reclaim: this manager's prefix, then the text's hash.
  EXPECT_EQ(a->name().rfind("flashroll-" + OwnNamePrefix() + "p", 0), 0u) << a->name();
  EXPECT_EQ(profiles.loaded(), 2u);
  const std::string plain_name = a->name();
  ASSERT_TRUE(a->Release().ok());
  EXPECT_TRUE(recorder.unloads.empty()) << "unloaded while a sandbox still ran under it";
  EXPECT_TRUE(a->Release().ok());  // a second release is a no-op
  EXPECT_TRUE(recorder.unloads.empty());
  ASSERT_TRUE(b->Release().ok());
  EXPECT_EQ(recorder.unloads, std::vector<std::string>{plain_name});
  // The next sandbox of that spec loads it again, under the same name.
  auto d = AcquireFor(profiles, plain);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->name(), plain_name);
  EXPECT_EQ(recorder.loads.size(), 3u);
  { AppArmorProfiles::Lease moved = std::move(*c); }  // a lease that goes releases
  EXPECT_EQ(recorder.unloads.size(), 2u);
  EXPECT_EQ(profiles.loaded(), 1u);
}

TEST(AppArmorProfilesTest, AFailedLoadLeavesNothingAndIsTriedAgain) {
  Recorder recorder;
  recorder.compile = false;
  AppArmorProfiles::Backend backend = recorder.Backend();
  int failures = 1;
  auto load = backend.load;
  backend.load = [&](const std::string& name, const std::string& text) {
    if (failures-- > 0) return Status::InvalidArgument("apparmor_parser refused the profile");
    return load(name, text);
  };
  AppArmorProfiles profiles(backend);
  auto first = AcquireFor(profiles, SandboxSpec());
  EXPECT_EQ(first.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(profiles.loaded(), 0u);
  auto second = AcquireFor(profiles, SandboxSpec());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(profiles.loaded(), 1u);
}

// Creates and destroys racing on one spec: the profile is never loaded
// while it is loaded, never unloaded while a lease lives, and nothing is
// left once all are gone.
TEST(AppArmorProfilesTest, ConcurrentLeasesNeverUnloadAProfileInUse) {
  Recorder recorder;
  recorder.compile = false;
  AppArmorProfiles profiles(recorder.Backend());
  std::atomic<bool> lost{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto lease = AcquireFor(profiles, SandboxSpec());
        if (!lease.ok()) return lost.store(true);
        std::lock_guard<std::mutex> lock(recorder.mu);
        if (recorder.live.count(lease->name()) == 0) lost = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(lost) << "a sandbox held a profile that was not loaded";
  EXPECT_FALSE(recorder.twice);
  EXPECT_EQ(recorder.loads.size(), recorder.unloads.size());
  EXPECT_EQ(profiles.loaded(), 0u);
  EXPECT_TRUE(recorder.live.empty());
}

}  // namespace
}  // namespace flashroll::sandbox
