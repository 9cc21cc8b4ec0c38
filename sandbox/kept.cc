#include "sandbox/kept.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/json.h"
#include "sandbox/naming.h"

namespace flashroll::sandbox {

std::string KeptRecordPath(const std::string& id) { return std::string(kKeptDir) + "/" + id + ".json"; }
std::string KeptSocketPath(const std::string& id) { return std::string(kKeptDir) + "/" + id + ".sock"; }

Status EnsureKeptDir() {
  for (const char* dir : {"/run/flashroll", kKeptDir}) {
    if (::mkdir(dir, 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, std::string("mkdir ") + dir);
  }
  return Status::Ok();
}

Status WriteKeptRecord(const KeptRecord& r) {
  const Json json = {{"id", r.id},
                     {"manager", r.manager},
                     {"init_pid", r.init_pid},
                     {"init_start_time", r.init_start_time},
                     {"host_uid", r.host_uid},
                     {"generation", r.generation},
                     {"disk_device", r.disk_device},
                     {"host_address", r.host_address},
                     {"created_ms", r.created_ms},
                     {"expires_ms", r.expires_ms},
                     {"annotation", r.annotation}};
  const std::string path = KeptRecordPath(r.id);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json.dump() << "\n";
    out.flush();
    if (!out) return Status::IoError("kept sandbox " + r.id + ": cannot write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status failed = Status::FromErrno(errno, "kept sandbox " + r.id + ": rename " + tmp);
    ::unlink(tmp.c_str());
    return failed;
  }
  return Status::Ok();
}

Result<KeptRecord> ReadKeptRecord(const std::string& id) {
  const std::string path = KeptRecordPath(id);
  std::ifstream in(path);
  if (!in) return Status::NotFound("kept sandbox " + id + ": no record " + path);
  std::stringstream text;
  text << in.rdbuf();
  KeptRecord r;
  try {
    const Json json = Json::parse(text.str());
    r.id = json.at("id").get<std::string>();
    r.manager = json.at("manager").get<std::string>();
    r.init_pid = json.at("init_pid").get<pid_t>();
    r.init_start_time = json.at("init_start_time").get<unsigned long long>();
    r.host_uid = json.at("host_uid").get<uint32_t>();
    r.generation = json.at("generation").get<uint32_t>();
    r.disk_device = json.at("disk_device").get<std::string>();
    r.host_address = json.at("host_address").get<std::string>();
    r.created_ms = json.at("created_ms").get<int64_t>();
    r.expires_ms = json.at("expires_ms").get<int64_t>();
    r.annotation = json.at("annotation").get<std::string>();
  } catch (const std::exception& e) {
    return Status::Corruption(path + ": not a kept sandbox record (" + e.what() + ")");
  }
  if (r.id != id) return Status::Corruption(path + ": the record is of " + r.id);
  return r;
}

std::vector<std::string> ListKeptRecords() {
  std::vector<std::string> ids;
  DIR* dir = ::opendir(kKeptDir);
  if (dir == nullptr) return ids;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kNamePrefix, 0) == 0 && name.size() > 5 && name.ends_with(".json")) {
      ids.push_back(name.substr(0, name.size() - 5));
    }
  }
  ::closedir(dir);
  return ids;
}

void RemoveKept(const std::string& id) {
  ::unlink(KeptRecordPath(id).c_str());
  ::unlink(KeptSocketPath(id).c_str());
}

namespace {

Result<sockaddr_un> SocketAddress(const std::string& id) {
  sockaddr_un address {};
  address.sun_family = AF_UNIX;
  const std::string path = KeptSocketPath(id);
  if (path.size() >= sizeof(address.sun_path)) return Status::InvalidArgument("kept sandbox: path too long: " + path);
  path.copy(address.sun_path, path.size());
  return address;
}

}  // namespace

Result<UniqueFd> ListenForNextManager(const std::string& id) {
  FR_ASSIGN_OR_RETURN(sockaddr_un address, SocketAddress(id));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "kept sandbox " + id + ": socket");
  ::unlink(address.sun_path);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Status::FromErrno(errno, "kept sandbox " + id + ": bind " + address.sun_path);
  }
  if (::listen(fd.get(), 4) != 0) return Status::FromErrno(errno, "kept sandbox " + id + ": listen");
  return fd;
}

Result<UniqueFd> ConnectToKeptInit(const std::string& id) {
  FR_ASSIGN_OR_RETURN(sockaddr_un address, SocketAddress(id));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "kept sandbox " + id + ": socket");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Status::FromErrno(errno, "kept sandbox " + id + ": connect " + address.sun_path);
  }
  return fd;
}

Result<UniqueFd> OpenKeptInit(const KeptRecord& record) {
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, record.init_pid, 0)));
  if (!pidfd.valid()) {
    if (errno == ESRCH) return Status::NotFound("kept sandbox " + record.id + ": its init has exited");
    return Status::FromErrno(errno, "kept sandbox " + record.id + ": pidfd_open");
  }
  // Checked after the open: the pidfd refers to whatever ran under the pid
  // then, so a match now is a match for the descriptor's whole life.
  if (!KeptInitLives(record)) return Status::NotFound("kept sandbox " + record.id + ": its init has exited");
  return pidfd;
}

bool KeptInitLives(const KeptRecord& record) {
  if (record.init_pid <= 0 || record.init_start_time == 0 ||
      ProcessStartTime(record.init_pid) != record.init_start_time) {
    return false;
  }
  // An init that exited but was not reaped yet (a zombie) ended its sandbox.
  std::ifstream in("/proc/" + std::to_string(record.init_pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

bool KeptAlive(const std::string& id) {
  auto record = ReadKeptRecord(id);
  return record.ok() && KeptInitLives(*record);
}

}  // namespace flashroll::sandbox
