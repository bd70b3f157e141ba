// TCP sockets for the store: an owning descriptor, listen, connect-with-retry, and blocking send/recv
// bounded by a deadline. Plain POSIX (getaddrinfo, poll); IPv4 and IPv6. Gloo has its own transport
// and does not use these.
//
// Every send uses MSG_NOSIGNAL: writing to a peer that has gone away must be an error we can report
// (EPIPE), not SIGPIPE, whose default action kills the process without a word.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "distributed/errors.h"

namespace mt::dist::detail {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();

 private:
  int fd_ = -1;
};

// A listening socket on `port` of every interface (IPv6 dual-stack where the machine has IPv6, else
// IPv4), or with `loopback_only` of 127.0.0.1 alone (nothing off this machine can reach it). Port 0
// lets the kernel choose. SO_REUSEADDR, so a restarted job can reuse its port at once.
Socket listen_tcp(int port, bool loopback_only = false);
int local_port(const Socket& s);

// Connects to host:port, retrying while nobody listens there yet (the server may start late) until
// `deadline`. `what` names the peer in errors ("TCPStore 10.0.0.1:29500").
Socket connect_tcp(const std::string& host, int port, Clock::time_point deadline, const std::string& what);

void set_nonblocking(int fd);
void set_nodelay(int fd);

// Sends all of [data, data + n). Throws mt::Error when the peer has gone and TimeoutError at `deadline`.
void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what);
// Receives exactly n bytes. Returns false on a clean end of stream before the first byte; throws when
// the stream ends in the middle, on errors, and (TimeoutError) at `deadline`.
bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);

// Milliseconds from now to `deadline` for poll(): 0 when it has passed, capped to fit an int.
int poll_timeout_ms(Clock::time_point deadline);

}  // namespace mt::dist::detail
