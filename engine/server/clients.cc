#include "engine/server/clients.h"

#include <algorithm>

#include "common/strings.h"

namespace flashroll::engine {
namespace {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

std::optional<ApiError> ApiKeys::Identify(const HttpRequest& request, int* client) const {
  *client = 0;
  if (keys_.empty()) return std::nullopt;
  ApiError e;
  e.http_status = 401;
  e.code = "invalid_api_key";
  std::optional<std::string> header = request.Header("authorization");
  if (!header || header->size() < 7 || (header->compare(0, 7, "Bearer ") != 0 && header->compare(0, 7, "bearer ") != 0)) {
    e.message = "missing API key: send \"Authorization: Bearer <key>\"";
    return e;
  }
  const std::string_view sent = TrimWhitespace(std::string_view(*header).substr(7));
  // Every key is compared, so the time taken does not say which matched.
  int found = -1;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (ConstantTimeEquals(sent, keys_[i])) found = static_cast<int>(i);
  }
  if (found < 0) {
    e.message = "incorrect API key";
    return e;
  }
  *client = found;
  return std::nullopt;
}

}  // namespace flashroll::engine
