// Helpers shared by common/http.cc, http_server.cc and http_client.cc;
// not part of the public HTTP API.
#pragma once

#include <httplib.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace flashroll::http_internal {

// `s` in lower case (ASCII).
std::string Lower(std::string_view s);

// httplib's headers with their names lower-cased.
std::multimap<std::string, std::string> LowerCaseHeaders(const httplib::Headers& headers);

// The first value of `key` in `map`, or nullopt.
std::optional<std::string> First(const std::multimap<std::string, std::string>& map,
                                 const std::string& key);

}  // namespace flashroll::http_internal
