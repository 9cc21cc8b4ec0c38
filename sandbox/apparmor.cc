#include "sandbox/apparmor.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/child_process.h"
#include "common/log.h"
#include "sandbox/naming.h"
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

Result<AppArmorProfile> AppArmorProfile::Load(const std::string& name, const std::string& text) {
  FR_RETURN_IF_ERROR(RunAppArmorParser(text, /*load=*/true).Wrap("load AppArmor profile " + name));
  AppArmorProfile profile;
  profile.name_ = name;
  return profile;
}

AppArmorProfile& AppArmorProfile::operator=(AppArmorProfile&& other) noexcept {
  if (this != &other) {
    if (Status status = Unload(); !status.ok()) log::Warn("apparmor unload failed", {{"error", status.ToString()}});
    name_ = std::move(other.name_);
    other.name_.clear();
  }
  return *this;
}

AppArmorProfile::~AppArmorProfile() {
  if (Status status = Unload(); !status.ok()) log::Warn("apparmor unload failed", {{"error", status.ToString()}});
}

Status AppArmorProfile::Unload() {
  if (name_.empty()) return Status::Ok();
  Status status = WriteRemove(name_);
  if (status.ok()) name_.clear();
  return status;
}

Result<std::vector<std::string>> ReclaimAppArmorProfiles() {
  std::vector<std::string> removed;
  if (!AppArmorEnabled()) return removed;
  // One "name (mode)" a line.
  std::istringstream lines(ReadAll(std::string(kSecurityFs) + "/profiles"));
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(std::string(kProfilePrefix) + kNamePrefix, 0) != 0) continue;
    if (OwnerAlive(name.substr(sizeof(kProfilePrefix) - 1))) continue;
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
