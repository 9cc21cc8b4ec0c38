#include "common/http_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace flashroll::http_internal {
namespace {

thread_local ServedConnection* t_current_connection = nullptr;

// How often a wait for the next request looks whether the server stops.
constexpr std::chrono::milliseconds kStopCheckInterval{100};

void AddressText(const sockaddr_storage& address, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    port = ntohs(in6->sin6_port);
  }
  ip = text;
}

}  // namespace

ServedConnection::ServedConnection(int fd, SSL* ssl, const ConnectionLimits& limits)
    : fd_(fd), ssl_(ssl), limits_(limits), phase_deadline_(Clock::now() + limits.header_timeout) {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  if (ssl_ != nullptr) SSL_set_fd(ssl_, fd_);
}

bool ServedConnection::Handshake() {
  while (true) {
    const int ret = SSL_accept(ssl_);
    if (ret == 1) return true;
    const int error = SSL_get_error(ssl_, ret);
    ERR_clear_error();
    if (error == SSL_ERROR_WANT_READ) {
      if (!Wait(POLLIN, phase_deadline_)) return false;
    } else if (error == SSL_ERROR_WANT_WRITE) {
      if (!Wait(POLLOUT, phase_deadline_)) return false;
    } else {
      return false;
    }
  }
}

bool ServedConnection::AwaitRequest(bool first, const std::function<bool()>& stopping) {
  const Clock::time_point idle_deadline = first ? phase_deadline_ : Clock::now() + limits_.keep_alive_timeout;
  const bool pending = buffer_begin_ < buffer_end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  while (!pending) {
    if (stopping()) return false;
    const Clock::time_point now = Clock::now();
    if (now >= idle_deadline) return false;
    if (Wait(POLLIN, std::min(idle_deadline, now + kStopCheckInterval))) break;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return false;
  }
  if (stopping()) return false;
  if (!first) phase_deadline_ = Clock::now() + limits_.header_timeout;
  return true;
}

void ServedConnection::BeginBody() { phase_deadline_ = Clock::now() + limits_.body_timeout; }

void ServedConnection::EndBody() { phase_deadline_ = Clock::time_point::max(); }

void ServedConnection::DrainBeforeClose(std::chrono::milliseconds linger) {
  ::shutdown(fd_, SHUT_WR);
  const Clock::time_point deadline = Clock::now() + linger;
  char discard[16384];
  while (Wait(POLLIN, deadline)) {
    const ssize_t n = ::recv(fd_, discard, sizeof(discard), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return;
  }
}

void ServedConnection::HoldPeerSlot(PeerGate* gate, std::string peer) {
  gate_ = gate;
  peer_ = std::move(peer);
}

void ServedConnection::ReleasePeerSlot() {
  if (gate_ != nullptr) gate_->Release(peer_);
  gate_ = nullptr;
}

bool ServedConnection::Wait(short events, Clock::time_point deadline) const {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, events, 0};
    const int timeout = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    const int ready = ::poll(&p, 1, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    // A hang-up with bytes still queued is readable: the read sees the end.
    if ((p.revents & events) != 0) return true;
    return false;
  }
}

ServedConnection::Clock::time_point ServedConnection::ReadDeadline() const {
  return std::min(phase_deadline_, Clock::now() + limits_.read_timeout);
}

ssize_t ServedConnection::ReadSome(char* ptr, size_t size, Clock::time_point deadline) {
  while (true) {
    if (ssl_ == nullptr) {
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!Wait(POLLIN, deadline)) return -1;
      continue;
    }
    const int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    ERR_clear_error();
    if (error == SSL_ERROR_ZERO_RETURN) return 0;
    if (error == SSL_ERROR_WANT_READ) {
      if (!Wait(POLLIN, deadline)) return -1;
    } else if (error == SSL_ERROR_WANT_WRITE) {
      if (!Wait(POLLOUT, deadline)) return -1;
    } else {
      return -1;
    }
  }
}

bool ServedConnection::is_readable() const {
  if (buffer_begin_ < buffer_end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
  return Wait(POLLIN, ReadDeadline());
}

bool ServedConnection::is_writable() const {
  return Wait(POLLOUT, Clock::now() + limits_.write_timeout);
}

ssize_t ServedConnection::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (buffer_begin_ == buffer_end_) {
    if (size >= sizeof(buffer_)) return ReadSome(ptr, size, ReadDeadline());
    const ssize_t n = ReadSome(buffer_, sizeof(buffer_), ReadDeadline());
    if (n <= 0) return n;
    buffer_begin_ = 0;
    buffer_end_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, buffer_end_ - buffer_begin_);
  std::memcpy(ptr, buffer_ + buffer_begin_, n);
  buffer_begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ServedConnection::write(const char* ptr, size_t size) {
  const Clock::time_point deadline = Clock::now() + limits_.write_timeout;
  while (true) {
    if (ssl_ == nullptr) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!Wait(POLLOUT, deadline)) return -1;
      continue;
    }
    const int n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    ERR_clear_error();
    if (error == SSL_ERROR_WANT_WRITE) {
      if (!Wait(POLLOUT, deadline)) return -1;
    } else if (error == SSL_ERROR_WANT_READ) {
      if (!Wait(POLLIN, deadline)) return -1;
    } else {
      return -1;
    }
  }
}

void ServedConnection::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) AddressText(address, ip, port);
}

void ServedConnection::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) AddressText(address, ip, port);
}

ServedConnection* CurrentConnection() { return t_current_connection; }

CurrentConnectionScope::CurrentConnectionScope(ServedConnection* connection) {
  t_current_connection = connection;
}

CurrentConnectionScope::~CurrentConnectionScope() { t_current_connection = nullptr; }

bool PeerGate::Admit(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t& held = held_[peer];
  if ((max_per_peer_ != 0 && held >= max_per_peer_) || (max_total_ != 0 && total_ >= max_total_)) {
    if (held == 0) held_.erase(peer);
    return false;
  }
  ++held;
  ++total_;
  return true;
}

void PeerGate::Release(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(peer);
  if (it == held_.end()) return;
  if (--it->second == 0) held_.erase(it);
  --total_;
}

std::string PeerAddress(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  std::string ip;
  int port = 0;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) AddressText(address, ip, port);
  return ip;
}

}  // namespace flashroll::http_internal
