// Kept sandboxes (kept.h) on the Manager's side: the records it writes,
// which managers hold them, adoption and discard of orphans.
#include <cstdlib>
#include <mutex>
#include <set>

#include "common/log.h"
#include "sandbox/bpf_pins.h"
#include "sandbox/kept.h"
#include "sandbox/launcher.h"
#include "sandbox/manager_impl.h"
#include "sandbox/naming.h"
#include "sandbox/reclaim.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

namespace {

// Which managers of this process are open, by number: a kept sandbox's
// record names its manager as "<process's name prefix>m<number>".
std::mutex open_managers_mu;
std::set<uint64_t> open_managers;  // guarded by open_managers_mu
std::atomic<uint64_t> next_manager_number{1};

}  // namespace

// Whether the manager a record names is open: in this process, by number;
// in another, by whether that process runs.
bool ManagerOpen(const std::string& manager) {
  const std::string& own = OwnNamePrefix();
  if (manager.rfind(own, 0) == 0 && manager.size() > own.size() + 1 && manager[own.size()] == 'm') {
    std::lock_guard<std::mutex> lock(open_managers_mu);
    return open_managers.count(std::strtoull(manager.c_str() + own.size() + 1, nullptr, 10)) != 0;
  }
  return OwnerAlive(manager);
}

// A kept sandbox's record as it stands, held by manager `manager`.
KeptRecord RecordOf(const Sandbox& sb, const std::string& manager) {
  KeptRecord record;
  record.id = sb.id;
  record.manager = manager;
  record.init_pid = sb.init.pid;
  record.init_start_time = ProcessStartTime(sb.init.pid);
  record.host_uid = sb.range.base;
  record.generation = sb.generation;
  record.disk_device = sb.disk_device;
  record.host_address = sb.host_address;
  const auto ms = [](SystemClock::time_point t) {
    return t == SystemClock::time_point() ? int64_t{0}
                                          : std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  record.created_ms = ms(sb.created);
  record.expires_ms = ms(sb.expires);
  record.annotation = sb.annotation;
  return record;
}

std::string OpenKeepingManager(uint64_t* number) {
  *number = next_manager_number++;
  std::lock_guard<std::mutex> lock(open_managers_mu);
  open_managers.insert(*number);
  return OwnNamePrefix() + "m" + std::to_string(*number);
}

void CloseKeepingManager(uint64_t number) {
  std::lock_guard<std::mutex> lock(open_managers_mu);
  open_managers.erase(number);
}

std::vector<std::pair<std::string, std::string>> Manager::Orphans() {
  std::vector<std::pair<std::string, std::string>> orphans;
  if (!impl_->keep_sandboxes) return orphans;
  for (const std::string& id : ListKeptRecords()) {
    if (impl_->Find(id).ok()) continue;
    auto record = ReadKeptRecord(id);
    if (!record.ok() || !KeptInitLives(*record) || ManagerOpen(record->manager)) continue;
    orphans.emplace_back(id, record->annotation);
  }
  return orphans;
}

Status Manager::Adopt(const std::string& id, const SandboxSpec& spec, const std::string& client_key) {
  if (!impl_->keep_sandboxes) return Status::FailedPrecondition("adopt " + id + ": this manager keeps no sandboxes");
  if (impl_->Find(id).ok()) return Status::AlreadyExists("adopt " + id + ": this manager holds it already");
  FR_ASSIGN_OR_RETURN(KeptRecord record, ReadKeptRecord(id));
  if (ManagerOpen(record.manager)) {
    return Status::FailedPrecondition("adopt " + id + ": the manager " + record.manager + " still holds it");
  }
  auto sb = std::make_shared<Sandbox>();
  sb->id = id;
  sb->spec = spec;
  sb->client_key = client_key;
  sb->kept = sb->adopted = true;
  sb->generation = record.generation + 1;
  sb->next_exec_id = (sb->generation << 24) | 1;  // below any id an earlier manager's command may still run under
  sb->range = {record.host_uid, impl_->userns_width};
  sb->disk_device = record.disk_device;
  sb->host_address = record.host_address;
  sb->annotation = record.annotation;
  sb->created = SystemClock::time_point(std::chrono::milliseconds(record.created_ms));
  if (record.expires_ms > 0) sb->expires = SystemClock::time_point(std::chrono::milliseconds(record.expires_ms));
  sb->init.pid = record.init_pid;
  FR_ASSIGN_OR_RETURN(sb->init.pidfd, OpenKeptInit(record));
  FR_ASSIGN_OR_RETURN(sb->cgroup, impl_->cgroups->Adopt(id));
  FR_ASSIGN_OR_RETURN(sb->init.control, ConnectToKeptInit(id));
  FR_ASSIGN_OR_RETURN(bool frozen, sb->cgroup->Frozen());
  sb->state = frozen ? State::kFrozen : State::kRunning;
  FR_RETURN_IF_ERROR(WriteKeptRecord(RecordOf(*sb, impl_->manager_name)).Wrap("adopt " + id));
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!client_key.empty()) impl_->by_client_key[client_key] = id;
    impl_->sandboxes[id] = sb;
    if (record.expires_ms > 0 && !impl_->ttl_thread.joinable() && !impl_->stopping) {
      Impl* raw = impl_.get();
      impl_->ttl_thread = std::thread([raw] { raw->TtlLoop(); });
    }
  }
  if (record.expires_ms > 0) impl_->ttl_cv.notify_all();
  impl_->events.Emit(id, EventKind::kCreated, "adopted from the manager before this one");
  Status watched;
  {
    std::lock_guard<std::mutex> lock(sb->mu);
    if (impl_->watcher != nullptr) {
      watched = impl_->watcher->Watch(id, sb->init.pidfd.get(), sb->init.control.get(), sb->init.pid,
                                      sb->cgroup.get());
    }
  }
  if (!watched.ok()) {
    (void)impl_->DestroySandbox(sb, "crash watch failed");
    return watched.Wrap("adopt");
  }
  log::Info("sandbox adopted", {{"id", id}, {"init_pid", sb->init.pid}});
  return Status::Ok();
}

Status Manager::DiscardOrphan(const std::string& id) {
  if (!impl_->keep_sandboxes) return Status::FailedPrecondition("discard " + id + ": this manager keeps no sandboxes");
  FR_ASSIGN_OR_RETURN(KeptRecord record, ReadKeptRecord(id));
  if (ManagerOpen(record.manager)) {
    return Status::FailedPrecondition("discard " + id + ": the manager " + record.manager + " still holds it");
  }
  // Its init first (cgroup.kill reaches every process), then what it left.
  if (auto pidfd = OpenKeptInit(record); pidfd.ok()) {
    InitProcess init;
    init.pid = record.init_pid;
    init.pidfd = std::move(*pidfd);
    if (auto cgroup = impl_->cgroups->Adopt(id); cgroup.ok()) (void)(*cgroup)->Kill();
    // Not our child: the kernel reaps it; wait for the pidfd to say so.
    FR_RETURN_IF_ERROR(KillAndReapInit(init, impl_->teardown_timeout).Wrap("discard " + id));
  }
  FR_RETURN_IF_ERROR(ReclaimSandbox(*impl_->cgroups, id).Wrap("discard"));
  FR_RETURN_IF_ERROR(ReclaimVeths().status().Wrap("discard " + id));
  RemoveKept(id);
  log::Info("sandbox discarded", {{"id", id}});
  return Status::Ok();
}

Status Manager::Annotate(const std::string& id, const std::string& annotation) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  std::lock_guard<std::mutex> lock(sb->mu);
  if (!sb->kept) return Status::FailedPrecondition("annotate " + id + ": the sandbox is not kept");
  if (sb->state == State::kDestroyed) return Status::NotFound("sandbox " + id + " was destroyed");
  sb->annotation = annotation;
  return WriteKeptRecord(RecordOf(*sb, impl_->manager_name)).Wrap("annotate " + id);
}

}  // namespace flashroll::sandbox
