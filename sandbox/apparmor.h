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
// runs are confined from their first instruction. Profiles are named after
// their sandbox (naming.h), so start-up reclaim removes those of managers
// that were killed.
//
// Thread safety: functions may be called from any thread; an
// AppArmorProfile is used by one thread at a time. AppArmorChild runs only
// in the freshly cloned child.
#pragma once

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

// A profile loaded in the kernel; unloaded when destroyed. Move-only.
class AppArmorProfile {
 public:
  // Loads `text`, which defines the profile `name`.
  static Result<AppArmorProfile> Load(const std::string& name, const std::string& text);

  AppArmorProfile() = default;
  AppArmorProfile(AppArmorProfile&& other) noexcept : name_(std::move(other.name_)) { other.name_.clear(); }
  AppArmorProfile& operator=(AppArmorProfile&& other) noexcept;
  AppArmorProfile(const AppArmorProfile&) = delete;
  AppArmorProfile& operator=(const AppArmorProfile&) = delete;
  ~AppArmorProfile();  // Unload(), failures logged

  // Removes the profile from the kernel. OK also when not loaded or
  // already gone; otherwise the failed write, naming the profile.
  Status Unload();

  const std::string& name() const { return name_; }

 private:
  std::string name_;  // empty: owns nothing
};

// Unloads the profiles of sandboxes whose manager is gone. A no-op without
// AppArmor. Returns the names removed, or the first failure.
Result<std::vector<std::string>> ReclaimAppArmorProfiles();

// Child side: asks for `exec_request` ("exec <profile>") on the next exec.
// Empty: nothing (no AppArmor, or none wanted).
ChildStatus AppArmorChild(const std::string& exec_request);

}  // namespace flashroll::sandbox
