// Kept sandboxes: those that outlive their manager (Manager::Options::
// keep_sandboxes, which sandboxd sets) until the next manager adopts them.
//
// Each has a record, kKeptDir/<name>.json, and the socket its init listens
// on for the next manager, kKeptDir/<name>.sock (init_protocol.h). The
// directory is root's alone (0700) and on /run, so records do not outlive
// a reboot, which their sandboxes do not either. A record names the init by
// pid and start time, so a recycled pid is never taken for it. Every
// manager's start-up reclaim (reclaim.h) leaves a sandbox alone while its
// record names a live init, and reclaims it once the init is gone (it ends
// on its own when no manager adopts it in time).
//
// Thread safety: the functions may be called from any thread; a record is
// replaced atomically (rename).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

inline constexpr char kKeptDir[] = "/run/flashroll/kept";

struct KeptRecord {
  std::string id;  // the Manager's name, fr-...
  // The manager that holds it now (its process's name prefix, naming.h,
  // and which of the process's managers): a record whose manager is open
  // is that manager's, not one to adopt.
  std::string manager;
  pid_t init_pid = -1;
  unsigned long long init_start_time = 0;  // naming.h's ProcessStartTime
  uint32_t host_uid = 0;                   // root inside
  // How many managers adopted it: exec ids of the next start at this << 24,
  // so a command of an earlier manager's that still runs is never signalled
  // in place of a new one.
  uint32_t generation = 0;
  std::string disk_device;
  std::string host_address;  // --net policy's host side, e.g. "10.213.4.1"
  int64_t created_ms = 0;    // CLOCK_REALTIME
  int64_t expires_ms = 0;    // 0: no TTL
  // Opaque to the Manager: what its owner (the node API) keeps with it.
  std::string annotation;
};

std::string KeptRecordPath(const std::string& id);
std::string KeptSocketPath(const std::string& id);

// Makes kKeptDir (0700) if needed.
Status EnsureKeptDir();

Status WriteKeptRecord(const KeptRecord& record);
// kNotFound when there is none; kCorruption naming the file when it does not parse.
Result<KeptRecord> ReadKeptRecord(const std::string& id);
// The names with a record.
std::vector<std::string> ListKeptRecords();
// Removes the record and the socket (what is gone already is fine).
void RemoveKept(const std::string& id);

// The listening socket a kept sandbox's init takes (init_protocol.h), bound
// at KeptSocketPath(id) (replacing what was there).
Result<UniqueFd> ListenForNextManager(const std::string& id);
// A manager's connection to a kept sandbox's init: its control socket.
Result<UniqueFd> ConnectToKeptInit(const std::string& id);
// A pidfd of the record's init, checked to be that process (not a recycled
// pid): kNotFound when it is gone.
Result<UniqueFd> OpenKeptInit(const KeptRecord& record);

// Whether `record`'s init is the process running under its pid.
bool KeptInitLives(const KeptRecord& record);
// Whether sandbox `id` is kept and its init lives: reclaim leaves it alone.
bool KeptAlive(const std::string& id);

}  // namespace flashroll::sandbox
