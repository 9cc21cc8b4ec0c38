#include "common/http.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>

#include "common/http_internal.h"
#include "common/log.h"
#include "common/strings.h"

namespace flashroll {

namespace http_internal {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}


std::multimap<std::string, std::string> LowerCaseHeaders(const httplib::Headers& headers) {
  std::multimap<std::string, std::string> out;
  for (const auto& [name, value] : headers) out.emplace(Lower(name), value);
  return out;
}

std::optional<std::string> First(const std::multimap<std::string, std::string>& map,
                                 const std::string& key) {
  auto it = map.find(key);
  if (it == map.end()) return std::nullopt;
  return it->second;
}


}  // namespace http_internal

namespace {

using http_internal::First;
using http_internal::Lower;

constexpr size_t kMaxTokenFileBytes = 4096;
// How much of a non-JSON error body is quoted in a Status message.
constexpr size_t kErrorSnippetBytes = 200;

}  // namespace

int HttpStatusFromCode(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
      return 409;
    case Code::kFailedPrecondition:
      return 409;
    case Code::kResourceExhausted:
      return 429;
    case Code::kUnimplemented:
      return 501;
    case Code::kUnavailable:
      return 503;
    case Code::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Code CodeFromHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return Code::kInvalidArgument;
    case 401:
      return Code::kUnauthenticated;
    case 403:
      return Code::kPermissionDenied;
    case 404:
      return Code::kNotFound;
    case 408:
      return Code::kDeadlineExceeded;
    case 409:
      return Code::kAlreadyExists;
    case 412:
      return Code::kFailedPrecondition;
    case 413:
      return Code::kResourceExhausted;
    case 429:
      return Code::kResourceExhausted;
    case 501:
      return Code::kUnimplemented;
    case 502:
      return Code::kUnavailable;
    case 503:
      return Code::kUnavailable;
    case 504:
      return Code::kDeadlineExceeded;
    default:
      break;
  }
  if (http_status < 400) return Code::kOk;
  if (http_status < 500) return Code::kInvalidArgument;
  return Code::kInternal;
}

Json ErrorJson(const Status& status) {
  return Json{{"error", {{"code", CodeName(status.code())}, {"message", status.message()}}}};
}

Status StatusFromHttpReply(int http_status, std::string_view body) {
  if (http_status >= 200 && http_status < 300) return Status::Ok();
  std::string prefix = "HTTP " + std::to_string(http_status);
  if (http_status < 400) return Status::Internal(prefix + ": unexpected reply");
  Code fallback = CodeFromHttpStatus(http_status);
  Result<Json> parsed = ParseJson(body);
  if (parsed.ok()) {
    const Json& j = *parsed;
    auto error = j.is_object() ? j.find("error") : j.end();
    if (error != j.end() && error->is_object()) {
      auto code = error->find("code");
      auto message = error->find("message");
      if (code != error->end() && code->is_string() && message != error->end() &&
          message->is_string()) {
        const std::optional<Code> c = CodeFromName(code->get<std::string>());
        return Status(c.value_or(fallback), message->get<std::string>());
      }
    }
  }
  std::string_view snippet = TrimWhitespace(body.substr(0, kErrorSnippetBytes));
  return Status(fallback, snippet.empty() ? prefix : prefix + ": " + std::string(snippet));
}

namespace {

// The text of a token file: see LoadTokenFile.
Result<std::string> ReadTokenFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  std::string text;
  struct stat st;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = Status::FromErrno(errno, "fstat " + path);
  } else if (!S_ISREG(st.st_mode)) {
    status = Status::InvalidArgument(path + ": token file is not a regular file");
  } else if (static_cast<size_t>(st.st_size) > kMaxTokenFileBytes) {
    status = Status::InvalidArgument(path + ": token file is larger than " +
                                     std::to_string(kMaxTokenFileBytes) + " bytes");
  } else {
    char buffer[kMaxTokenFileBytes + 1];
    ssize_t n;
    do {
      n = ::read(fd, buffer, sizeof(buffer));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      status = Status::FromErrno(errno, "read " + path);
    } else {
      text.assign(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  FR_RETURN_IF_ERROR(status);
  if ((st.st_mode & 077) != 0) {
    char bits[8];
    std::snprintf(bits, sizeof(bits), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    log::Warn("token file is readable by group or others; chmod 600 it", {{"path", path}, {"mode", bits}});
  }
  return text;
}

Status CheckToken(const std::string& path, std::string_view token) {
  if (token.empty()) return Status::InvalidArgument(path + ": token file is empty");
  for (char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      return Status::InvalidArgument(path + ": token contains whitespace, control or non-ASCII characters");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> LoadTokenFile(const std::string& path) {
  FR_ASSIGN_OR_RETURN(const std::string text, ReadTokenFile(path));
  std::string_view token = TrimWhitespace(text);
  FR_RETURN_IF_ERROR(CheckToken(path, token));
  return std::string(token);
}

Result<std::vector<std::string>> LoadTokenFileLines(const std::string& path) {
  FR_ASSIGN_OR_RETURN(const std::string text, ReadTokenFile(path));
  std::vector<std::string> tokens;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line = TrimWhitespace(std::string_view(text).substr(at, end - at));
    at = end + 1;
    if (line.empty()) continue;
    FR_RETURN_IF_ERROR(CheckToken(path, line));
    if (std::find(tokens.begin(), tokens.end(), line) != tokens.end()) {
      return Status::InvalidArgument(path + ": a token is listed twice");
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) return Status::InvalidArgument(path + ": token file is empty");
  return tokens;
}

const char* HttpMethodName(HttpMethod method) {
  switch (method) {
    case HttpMethod::kGet:
      return "GET";
    case HttpMethod::kPost:
      return "POST";
    case HttpMethod::kPut:
      return "PUT";
    case HttpMethod::kPatch:
      return "PATCH";
    case HttpMethod::kDelete:
      return "DELETE";
  }
  return "GET";
}

const std::string& HttpRequest::Param(std::string_view name) const {
  static const std::string kEmpty;
  auto it = path_params.find(std::string(name));
  return it == path_params.end() ? kEmpty : it->second;
}

std::optional<std::string> HttpRequest::Query(std::string_view name) const {
  return First(query, std::string(name));
}

std::optional<std::string> HttpRequest::Header(std::string_view name) const {
  return First(headers, Lower(name));
}

Result<Json> HttpRequest::ParseJsonBody() const {
  if (body.size() > max_json_bytes) {
    return Status::InvalidArgument("request body: " + std::to_string(body.size()) +
                                   " bytes of JSON, above this server's limit of " + std::to_string(max_json_bytes));
  }
  FR_RETURN_IF_ERROR(CheckJsonDepth(body, max_json_depth, "request body"));
  return ParseJson(body, "request body");
}

bool HttpRequest::Holds(std::string_view scope) const {
  return every_scope || std::find(scopes.begin(), scopes.end(), scope) != scopes.end();
}

std::optional<std::string> HttpResponse::Header(std::string_view name) const {
  return First(headers, Lower(name));
}

}  // namespace flashroll
