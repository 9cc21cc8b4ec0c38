// AppArmor in the kernel: loading a sandbox's profile (apparmor_profile.h)
// and switching its init into it. Only where the kernel has AppArmor
// (/sys/kernel/security/apparmor exists); elsewhere the manager skips this
// step (one debug log line) and the other fences (mount namespace,
// Landlock, seccomp) stand alone.
//
// The kernel takes only compiled policy, so a profile is loaded with
// apparmor_parser --replace; it is unloaded by writing its name to the
// kernel's .remove file. The child asks for the profile on its next exec
// ("exec <name>" to /proc/self/attr/apparmor/exec), so the init and all it
// runs are confined from their first instruction. Profile names carry their
// manager's name prefix (naming.h), so start-up reclaim removes those of
// managers that were killed.
//
// Thread safety: functions and AppArmorProfiles may be called from any
// thread; a Lease is used by one thread at a time. AppArmorChild runs only
// in the freshly cloned child.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

// True when the kernel has AppArmor enabled (its securityfs directory exists).
bool AppArmorEnabled();

// Runs apparmor_parser on `text`: with `load`, replacing the profile in the
// kernel; without, only compiling it (--skip-kernel-load), which checks it.
// Returns kNotFound when apparmor_parser is not installed, kInvalidArgument
// with the parser's output when it refuses the profile.
Status RunAppArmorParser(const std::string& text, bool load);

// Loads a profile into the kernel / removes it by name (the kernel's
// .remove file; OK when it is not loaded). What AppArmorProfiles uses unless
// told otherwise.
Status LoadAppArmorProfile(const std::string& name, const std::string& text);
Status UnloadAppArmorProfile(const std::string& name);

// One manager's loaded profiles, one per distinct profile text. Sandboxes
// whose specs give the same profile share it, so apparmor_parser compiles
// and loads it once (tens of ms each time), not on every create; it is
// unloaded when the last of them lets go. A profile is named by the
// manager's name prefix and a hash of its text
// ("flashroll-fr-<pid>-<start>-p<16 hex>"): start-up reclaim finds a killed
// manager's as it finds its sandboxes. The profile's ptrace and signal rules
// then allow peers in every sandbox of that profile; their pid namespaces
// keep them from naming each other's processes.
struct AppArmorProfilesState;  // apparmor.cc

class AppArmorProfiles {
 public:
  struct Backend {
    std::function<Status(const std::string& name, const std::string& text)> load = LoadAppArmorProfile;
    std::function<Status(const std::string& name)> unload = UnloadAppArmorProfile;
  };

  // One sandbox's use of a loaded profile; the last lease of a profile
  // unloads it. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();  // Release(), failures logged

    // Lets go; the last lease unloads the profile and returns how that
    // went. OK when it holds nothing.
    Status Release();
    // Lets go without unloading the profile (a kept sandbox whose manager
    // stops, sandbox.h: its init still runs in it).
    void Abandon() {
      state_.reset();
      key_.clear();
      name_.clear();
    }
    // The profile's name, empty when the lease holds nothing.
    const std::string& name() const { return name_; }

   private:
    friend class AppArmorProfiles;
    std::shared_ptr<AppArmorProfilesState> state_;
    std::string key_, name_;
  };

  AppArmorProfiles();  // the kernel's: LoadAppArmorProfile, UnloadAppArmorProfile
  explicit AppArmorProfiles(Backend backend);

  // The profile that `generate(name)` writes, loaded once while any lease
  // on it lives. `generate` must give the same text for the same name and
  // spec: it is called with a placeholder name to find the profile, then
  // with the profile's name when it is loaded.
  Result<Lease> Acquire(const std::function<Result<std::string>(const std::string& name)>& generate);

  // Profiles loaded now.
  size_t loaded() const;

 private:
  std::shared_ptr<AppArmorProfilesState> state_;
};

// Unloads the profiles of sandboxes whose manager is gone. A no-op without
// AppArmor. Returns the names removed, or the first failure.
Result<std::vector<std::string>> ReclaimAppArmorProfiles();

// Child side: asks for `exec_request` ("exec <profile>") on the next exec.
// Empty: nothing (no AppArmor, or none wanted).
ChildStatus AppArmorChild(const std::string& exec_request);

}  // namespace flashroll::sandbox
