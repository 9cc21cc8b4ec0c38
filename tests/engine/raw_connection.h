// A raw TCP connection to a test server, to cut a stream short, to hold a
// connection without a client library's help, or to read a stream's first
// chunks while it runs.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <string_view>

namespace flashroll::engine {

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawConnection() { Close(); }
  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `needle` has arrived (or EOF/timeout); returns all read.
  std::string ReadUntil(std::string_view needle) {
    while (received_.find(needle) == std::string::npos) {
      char chunk[4096];
      ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) break;
      received_.append(chunk, static_cast<size_t>(n));
    }
    return received_;
  }
  // Reads until `needle` has arrived `count` times (or EOF/timeout).
  std::string ReadUntilCount(std::string_view needle, size_t count) {
    auto occurrences = [&]() {
      size_t found = 0;
      for (size_t pos = received_.find(needle); pos != std::string::npos; pos = received_.find(needle, pos + 1)) ++found;
      return found;
    };
    while (occurrences() < count) {
      char chunk[4096];
      ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) break;
      received_.append(chunk, static_cast<size_t>(n));
    }
    return received_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

// A POST of a JSON body, with the bearer token when one is given.
inline std::string PostRequest(const std::string& path, const std::string& body, const std::string& bearer = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         (bearer.empty() ? std::string() : "Authorization: Bearer " + bearer + "\r\n") +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace flashroll::engine
