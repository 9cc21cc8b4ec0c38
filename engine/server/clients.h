// Clients of the OpenAI server: an API key is a client (--api-key-file
// may list several, one a line), and what a client makes (a session, a
// choice's engine sequence) is its own. Another client asking for it gets
// the 404 an unknown id gets, so ids leak nothing across keys.
//
// Thread safety: ApiKeys is immutable; Owners is guarded by its mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/http.h"
#include "engine/server/openai_request.h"

namespace flashroll::engine {

class ApiKeys {
 public:
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  // The client that sent `request`: the index of its key (0 when the server
  // takes no key), or the 401 when it sent none or an unknown one.
  std::optional<ApiError> Identify(const HttpRequest& request, int* client) const;

 private:
  std::vector<std::string> keys_;
};

class Owners {
 public:
  void Claim(uint64_t id, int client) {
    std::lock_guard<std::mutex> lock(mu_);
    owner_[id] = client;
  }
  void Forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    owner_.erase(id);
  }
  bool Owns(uint64_t id, int client) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = owner_.find(id);
    return it != owner_.end() && it->second == client;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, int> owner_;
};

// One client's claims for as long as a reply runs: each id added is the
// client's until the Claims goes.
class Claims {
 public:
  Claims(Owners& owners, int client) : owners_(owners), client_(client) {}
  ~Claims() {
    for (uint64_t id : ids_) owners_.Forget(id);
  }
  Claims(const Claims&) = delete;
  Claims& operator=(const Claims&) = delete;
  void Add(uint64_t id) {
    owners_.Claim(id, client_);
    ids_.push_back(id);
  }

 private:
  Owners& owners_;
  const int client_;
  std::vector<uint64_t> ids_;
};

}  // namespace flashroll::engine
