#include "sandbox/api/directory.h"

#include <sys/random.h>

#include <cstdio>
#include <set>

#include "common/json.h"
#include "common/log.h"
#include "sandbox/api/wire.h"

namespace flashroll::sandbox::api {

namespace {

// How many creates pass between sweeps for sandboxes that ended on their own.
constexpr size_t kPruneEvery = 64;

std::string ScopedKey(const std::string& client, const std::string& key) { return client + '\n' + key; }

}  // namespace

std::string NewPublicSandboxId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string id = "sb-";
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    id += hex;
  }
  return id;
}

Result<std::string> SandboxDirectory::Create(const std::string& client, const SandboxSpec& spec,
                                             const std::string& spec_digest, const std::string& key) {
  const std::string scoped = key.empty() ? std::string() : ScopedKey(client, key);
  const Status reused = Status::AlreadyExists("Idempotency-Key \"" + key +
                                              "\" was used for a different spec; use a new key for this one");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (++creates_since_prune_ >= kPruneEvery) PruneLocked();
    if (!scoped.empty()) {
      auto it = keys_.find(scoped);
      if (it != keys_.end() && it->second.spec_digest != spec_digest) return reused;
    }
  }
  // The Manager coalesces concurrent creates with one key; scoping it here
  // keeps another client's equal key apart.
  FR_ASSIGN_OR_RETURN(std::string internal, manager_->Create(spec, scoped));
  std::lock_guard<std::mutex> lock(mu_);
  if (!scoped.empty()) {
    auto it = keys_.find(scoped);
    if (it != keys_.end() && it->second.spec_digest != spec_digest) return reused;
  }
  std::string public_id;
  if (auto known = by_internal_.find(internal); known != by_internal_.end()) {
    public_id = known->second;
  } else {
    public_id = NewPublicSandboxId();
    entries_[public_id] = {internal, client};
    by_internal_[internal] = public_id;
  }
  if (!scoped.empty()) keys_[scoped] = {public_id, spec_digest};
  // For the sandboxd after this one, when the Manager keeps sandboxes.
  const Json annotation = {{"public_id", public_id}, {"owner", client},    {"key", scoped},
                           {"spec_digest", spec_digest}, {"spec", SpecToJson(spec)}};
  // A failure costs it its survival of this sandboxd, not its life now.
  if (Status annotated = manager_->Annotate(internal, annotation.dump());
      !annotated.ok() && annotated.code() != Code::kFailedPrecondition) {
    log::Warn("sandboxd: a kept sandbox's record could not be annotated; the next sandboxd discards it",
              {{"id", public_id}, {"error", annotated.ToString()}});
  }
  return public_id;
}

size_t SandboxDirectory::AdoptOrphans() {
  size_t adopted = 0;
  for (const auto& [internal, annotation] : manager_->Orphans()) {
    Status status = [&]() -> Status {
      FR_ASSIGN_OR_RETURN(Json json, ParseJson(annotation, "annotation of " + internal));
      const JsonView view(json, "annotation");
      FR_ASSIGN_OR_RETURN(JsonView public_id, view.Get("public_id"));
      FR_ASSIGN_OR_RETURN(JsonView owner, view.Get("owner"));
      FR_ASSIGN_OR_RETURN(JsonView key, view.Get("key"));
      FR_ASSIGN_OR_RETURN(JsonView digest, view.Get("spec_digest"));
      FR_ASSIGN_OR_RETURN(JsonView spec_json, view.Get("spec"));
      FR_ASSIGN_OR_RETURN(std::string id, public_id.AsString());
      FR_ASSIGN_OR_RETURN(std::string client, owner.AsString());
      FR_ASSIGN_OR_RETURN(std::string scoped, key.AsString());
      FR_ASSIGN_OR_RETURN(std::string spec_digest, digest.AsString());
      FR_ASSIGN_OR_RETURN(SandboxSpec spec, SpecFromJson(spec_json));
      FR_RETURN_IF_ERROR(manager_->Adopt(internal, spec, scoped));
      std::lock_guard<std::mutex> lock(mu_);
      entries_[id] = {internal, client};
      by_internal_[internal] = id;
      if (!scoped.empty()) keys_[scoped] = {id, spec_digest};
      return Status::Ok();
    }();
    if (status.ok()) {
      ++adopted;
      continue;
    }
    log::Warn("sandboxd: an orphan could not be adopted; discarding it", {{"id", internal}, {"error", status.ToString()}});
    if (Status discarded = manager_->DiscardOrphan(internal); !discarded.ok()) {
      log::Error("sandboxd: discarding an orphan failed", {{"id", internal}, {"error", discarded.ToString()}});
    }
  }
  return adopted;
}

Result<std::string> SandboxDirectory::Resolve(const std::string& client, const std::string& public_id,
                                              bool any_owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(public_id);
  if (it == entries_.end() || (!any_owner && it->second.owner != client)) {
    return Status::NotFound("sandbox " + public_id + ": not found");
  }
  return it->second.internal_id;
}

std::vector<std::pair<std::string, std::string>> SandboxDirectory::List(const std::string& client,
                                                                       bool every_owner) {
  std::lock_guard<std::mutex> lock(mu_);
  PruneLocked();
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [id, entry] : entries_) {
    if (every_owner || entry.owner == client) out.emplace_back(id, entry.owner);
  }
  return out;
}

void SandboxDirectory::PruneLocked() {
  creates_since_prune_ = 0;
  const std::vector<std::string> live_list = manager_->List();
  const std::set<std::string> live(live_list.begin(), live_list.end());
  std::vector<std::string> gone;
  for (const auto& [id, entry] : entries_) {
    if (live.count(entry.internal_id) == 0) gone.push_back(id);
  }
  for (const std::string& id : gone) EraseLocked(id);
}

void SandboxDirectory::EraseLocked(const std::string& public_id) {
  auto it = entries_.find(public_id);
  if (it == entries_.end()) return;
  by_internal_.erase(it->second.internal_id);
  entries_.erase(it);
  std::erase_if(keys_, [&](const auto& key) { return key.second.public_id == public_id; });
}

}  // namespace flashroll::sandbox::api
