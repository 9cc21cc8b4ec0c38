#include "sandbox/apparmor.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "common/child_process.h"
#include "common/log.h"
#include "sandbox/apparmor_profile.h"
#include "sandbox/kept.h"
#include "sandbox/naming.h"
#include "common/sha256.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

constexpr char kSecurityFs[] = "/sys/kernel/security/apparmor";
constexpr char kProfilePrefix[] = "flashroll-";

// apparmor_parser lives in /sbin, which a root PATH has but others may not.
std::string ParserPath() {
  for (const char* path : {"/usr/sbin/apparmor_parser", "/sbin/apparmor_parser"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "apparmor_parser";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteRemove(const std::string& name) {
  const std::string path = std::string(kSecurityFs) + "/.remove";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  if (::write(fd.get(), name.data(), name.size()) < 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "unload AppArmor profile " + name + " (write " + path + ")");
  }
  return Status::Ok();
}

}  // namespace

bool AppArmorEnabled() { return ::access(kSecurityFs, F_OK) == 0; }

Status RunAppArmorParser(const std::string& text, bool load) {
  char dir_template[] = "/tmp/flashroll-apparmor-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return Status::FromErrno(errno, "mkdtemp /tmp/flashroll-apparmor-XXXXXX");
  const std::string dir = dir_template;
  const std::string profile = dir + "/profile";
  const std::string output = dir + "/output";
  struct Cleanup {
    std::string dir, profile, output;
    ~Cleanup() {
      ::unlink(profile.c_str());
      ::unlink(output.c_str());
      ::rmdir(dir.c_str());
    }
  } cleanup{dir, profile, output};
  {
    std::ofstream out(profile);
    out << text;
    out.flush();
    if (!out) return Status::IoError("write " + profile);
  }
  ChildOptions options;
  options.argv = {ParserPath(), load ? "--replace" : "--skip-kernel-load", load ? "--skip-read-cache" : "--skip-cache",
                  profile};
  options.output_path = output;
  FR_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> parser, ChildProcess::Start(options));
  const std::optional<int> code = parser->Wait(std::chrono::seconds(60));
  if (!code.has_value()) {
    parser->Stop(std::chrono::milliseconds(100));
    return Status::DeadlineExceeded("apparmor_parser " + profile + ": no answer after 60 s");
  }
  if (*code != 0) {
    std::string said = ReadAll(output);
    while (!said.empty() && said.back() == '\n') said.pop_back();
    return Status::InvalidArgument("apparmor_parser refused the profile (exit " + std::to_string(*code) + "): " + said);
  }
  return Status::Ok();
}

Status LoadAppArmorProfile(const std::string& name, const std::string& text) {
  return RunAppArmorParser(text, /*load=*/true).Wrap("load AppArmor profile " + name);
}

Status UnloadAppArmorProfile(const std::string& name) { return WriteRemove(name); }

struct AppArmorProfilesState {
  AppArmorProfiles::Backend backend;
  std::mutex mu;
  struct Loaded {
    std::string name;
    int leases = 0;
  };
  std::map<std::string, Loaded> loaded;  // by the hash of the profile text, guarded by mu
};

AppArmorProfiles::AppArmorProfiles() : AppArmorProfiles(Backend()) {}

AppArmorProfiles::AppArmorProfiles(Backend backend) : state_(std::make_shared<AppArmorProfilesState>()) {
  state_->backend = std::move(backend);
}

Result<AppArmorProfiles::Lease> AppArmorProfiles::Acquire(
    const std::function<Result<std::string>(const std::string& name)>& generate) {
  FR_ASSIGN_OR_RETURN(std::string placeholder_text, generate(OwnNamePrefix() + "p"));
  Sha256 hash;
  hash.Update(placeholder_text.data(), placeholder_text.size());
  FR_ASSIGN_OR_RETURN(std::string digest, hash.HexDigest());
  const std::string key = digest.substr(0, 16);
  // Held while loading, so that a profile is never loaded twice, nor
  // unloaded by its last lease while another sandbox loads it again.
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->loaded.find(key);
  if (it == state_->loaded.end()) {
    const std::string sandbox_part = OwnNamePrefix() + "p" + key;
    FR_ASSIGN_OR_RETURN(std::string text, generate(sandbox_part));
    const std::string name = AppArmorProfileName(sandbox_part);
    FR_RETURN_IF_ERROR(state_->backend.load(name, text));
    it = state_->loaded.emplace(key, AppArmorProfilesState::Loaded{name, 0}).first;
  }
  ++it->second.leases;
  Lease lease;
  lease.state_ = state_;
  lease.key_ = key;
  lease.name_ = it->second.name;
  return lease;
}

size_t AppArmorProfiles::loaded() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->loaded.size();
}

AppArmorProfiles::Lease::Lease(Lease&& other) noexcept
    : state_(std::move(other.state_)), key_(std::move(other.key_)), name_(std::move(other.name_)) {
  other.name_.clear();
}

AppArmorProfiles::Lease& AppArmorProfiles::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (Status status = Release(); !status.ok()) log::Warn("apparmor unload failed", {{"error", status.ToString()}});
    state_ = std::move(other.state_);
    key_ = std::move(other.key_);
    name_ = std::move(other.name_);
    other.name_.clear();
  }
  return *this;
}

AppArmorProfiles::Lease::~Lease() {
  if (Status status = Release(); !status.ok()) log::Warn("apparmor unload failed", {{"error", status.ToString()}});
}

Status AppArmorProfiles::Lease::Release() {
  if (state_ == nullptr) return Status::Ok();
  std::shared_ptr<AppArmorProfilesState> state = std::move(state_);
  name_.clear();
  std::lock_guard<std::mutex> lock(state->mu);
  auto it = state->loaded.find(key_);
  if (it == state->loaded.end() || --it->second.leases > 0) return Status::Ok();
  const std::string name = it->second.name;
  state->loaded.erase(it);
  // A failed unload leaves the profile in the kernel until reclaim after
  // this manager; the next sandbox of that text loads it again (--replace).
  return state->backend.unload(name);
}

Result<std::vector<std::string>> ReclaimAppArmorProfiles() {
  std::vector<std::string> removed;
  if (!AppArmorEnabled()) return removed;
  // One "name (mode)" a line.
  std::istringstream lines(ReadAll(std::string(kSecurityFs) + "/profiles"));
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(std::string(kProfilePrefix) + kNamePrefix, 0) != 0) continue;
    const std::string owner = name.substr(sizeof(kProfilePrefix) - 1);
    if (OwnerAlive(owner) || KeptAlive(owner)) continue;
    FR_RETURN_IF_ERROR(WriteRemove(name).Wrap("reclaim"));
    log::Info("sandbox apparmor profile reclaimed", {{"profile", name}});
    removed.push_back(name);
  }
  return removed;
}

ChildStatus AppArmorChild(const std::string& exec_request) {
  if (exec_request.empty()) return ChildStatus::Ok();
  // The LSM-specific file first (kernels with stacked LSMs), then the
  // shared one.
  int fd = ::open("/proc/self/attr/apparmor/exec", O_WRONLY | O_CLOEXEC);
  if (fd < 0) fd = ::open("/proc/self/attr/exec", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ChildStatus::Errno("apparmor", "open", "/proc/self/attr/exec");
  const ssize_t n = ::write(fd, exec_request.data(), exec_request.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(exec_request.size())) {
    errno = n < 0 ? err : EIO;
    return ChildStatus::Errno("apparmor", "write", exec_request.c_str());
  }
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
