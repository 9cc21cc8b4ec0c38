// The server side of one HTTP connection, which HttpServer serves in place of
// cpp-httplib's own socket loop (common/http_server.cc). cpp-httplib bounds
// each read by a timeout but not a request's whole header or body, so a
// client sending a byte every few seconds (slowloris) holds a worker for
// ever. ServedConnection is the httplib::Stream the request parser reads
// from, and every read waits at most until its phase's deadline:
//
//   waiting   for a request's first byte: header_timeout on a new
//             connection (and for the TLS handshake), keep_alive_timeout
//             between requests
//   headers   header_timeout from the first byte
//   body      body_timeout from the end of the headers to the handler
//             having the whole body
//   handling  the handler runs; reads keep the per-read timeout
//
// Not part of the public HTTP API. Thread safety: a ServedConnection belongs
// to the one worker thread serving it; PeerGate is thread-safe.
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace flashroll::http_internal {

struct ConnectionLimits {
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
};

class PeerGate;

class ServedConnection final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;

  // `fd` is a connected socket, made non-blocking here; `ssl` (null for
  // plain HTTP) is set up on it. Neither is owned.
  ServedConnection(int fd, SSL* ssl, const ConnectionLimits& limits);

  // TLS: the server's half of the handshake, within the header timeout.
  bool Handshake();
  // Waits for the next request's first byte; false when the client closed,
  // stayed idle past the phase's deadline, or `stopping` turned true. The
  // headers phase starts then.
  bool AwaitRequest(bool first, const std::function<bool()>& stopping);
  // The headers were read: the body phase starts.
  void BeginBody();
  // The handler has its body (or needs none): no phase deadline until the
  // next request.
  void EndBody();

  // The reply is the connection's last: its request's body was not read, so
  // the next bytes would not start a request.
  void CloseAfterReply() { close_after_reply_ = true; }
  bool close_after_reply() const { return close_after_reply_; }
  // After the last reply: ends the sending side, then reads and discards
  // what the client still sends, until it closes or `linger` passes.
  void DrainBeforeClose(std::chrono::milliseconds linger);

  // The peer's unauthenticated slot (PeerGate::Admit), given back once a
  // request on this connection authenticates.
  void HoldPeerSlot(PeerGate* gate, std::string peer);
  void ReleasePeerSlot();

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

  ~ServedConnection() override { ReleasePeerSlot(); }
  ServedConnection(const ServedConnection&) = delete;
  ServedConnection& operator=(const ServedConnection&) = delete;

 private:
  // Waits for `events` until `deadline`; false on timeout, hang-up or error.
  bool Wait(short events, Clock::time_point deadline) const;
  // The end of the next read's wait: the per-read timeout, or the phase's
  // deadline when that comes first.
  Clock::time_point ReadDeadline() const;
  // One recv or SSL_read into `ptr`, waiting until `deadline`: bytes read,
  // 0 at the end of the stream, -1 on error or timeout.
  ssize_t ReadSome(char* ptr, size_t size, Clock::time_point deadline);

  const int fd_;
  SSL* const ssl_;
  const ConnectionLimits limits_;
  Clock::time_point phase_deadline_;
  bool close_after_reply_ = false;
  PeerGate* gate_ = nullptr;
  std::string peer_;
  // The request line and headers are read a byte at a time: buffered.
  char buffer_[4096];
  size_t buffer_begin_ = 0;
  size_t buffer_end_ = 0;
};

// The connection the calling worker thread serves (null on other threads):
// how handlers, which cpp-httplib calls on that thread, reach it.
ServedConnection* CurrentConnection();

class CurrentConnectionScope {
 public:
  explicit CurrentConnectionScope(ServedConnection* connection);
  ~CurrentConnectionScope();
  CurrentConnectionScope(const CurrentConnectionScope&) = delete;
  CurrentConnectionScope& operator=(const CurrentConnectionScope&) = delete;
};

// Bounds the connections that have not yet authenticated, per peer address
// and in all: what a client without a token can hold of the workers.
class PeerGate {
 public:
  // 0: no bound.
  PeerGate(size_t max_per_peer, size_t max_total) : max_per_peer_(max_per_peer), max_total_(max_total) {}

  // Takes a slot for a new connection from `peer`; false when the peer, or
  // every peer together, holds the most allowed.
  bool Admit(const std::string& peer);
  void Release(const std::string& peer);

 private:
  const size_t max_per_peer_;
  const size_t max_total_;
  std::mutex mu_;
  std::map<std::string, size_t> held_;  // guarded by mu_
  size_t total_ = 0;                     // guarded by mu_
};

// The address of the socket's peer ("127.0.0.1", "::1"); "" when unknown.
std::string PeerAddress(int fd);

}  // namespace flashroll::http_internal
