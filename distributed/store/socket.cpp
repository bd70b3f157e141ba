// Blocking TCP helpers with deadlines (see detail/socket.h).
#include "distributed/store/detail/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "distributed/store/tcp_store.h"  // find_free_port, raise_descriptor_limit

namespace mt::dist {

namespace detail {

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  MT_CHECK(flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl(O_NONBLOCK): ",
           std::strerror(errno));
}

void set_nodelay(int fd) {
  // Store messages are small request/reply pairs: Nagle's algorithm would hold each one back ~40 ms.
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Socket listen_tcp(int port, bool loopback_only) {
  MT_CHECK(port >= 0 && port <= 65535, "listen: port ", port, " is not in [0, 65535]");
  const int one = 1, zero = 0;
  // IPv6 with IPV6_V6ONLY off accepts IPv4 clients too (as ::ffff:a.b.c.d). Loopback only: IPv4's
  // 127.0.0.1, which "localhost" and the loopback MASTER_ADDRs resolve to.
  Socket s(loopback_only ? -1 : ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.valid()) {
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      MT_CHECK(err == EAFNOSUPPORT || err == EADDRNOTAVAIL, "cannot listen on port ", port, ": ",
               std::strerror(err), err == EADDRINUSE ? " (another process uses it; pick another port)" : "");
      s.close();
    }
  }
  if (!s.valid()) {  // loopback only, or no IPv6 on this machine
    s = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    MT_CHECK(s.valid(), "socket(): ", std::strerror(errno));
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    MT_CHECK(::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "cannot listen on port ",
             port, ": ", std::strerror(errno),
             errno == EADDRINUSE ? " (another process uses it; pick another port)" : "");
  }
  MT_CHECK(::listen(s.fd(), 1024) == 0, "listen(port ", port, "): ", std::strerror(errno));
  return s;
}

int local_port(const Socket& s) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  MT_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname: ",
           std::strerror(errno));
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

namespace {

// One connect() attempt to one address, bounded by `deadline`. Returns the connected socket, or an
// invalid one with `err` set.
Socket try_connect(const addrinfo& ai, Clock::time_point deadline, int& err) {
  Socket s(::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol));
  if (!s.valid()) {
    err = errno;
    return s;
  }
  set_nonblocking(s.fd());
  if (::connect(s.fd(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      return Socket();
    }
    pollfd p{s.fd(), POLLOUT, 0};
    const int ready = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (ready <= 0) {
      err = ready == 0 ? ETIMEDOUT : errno;
      return Socket();
    }
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Socket();
  }
  // Back to blocking: the client does one request at a time and bounds each wait with poll().
  const int flags = ::fcntl(s.fd(), F_GETFL, 0);
  ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
  set_nodelay(s.fd());
  return s;
}

}  // namespace

Socket connect_tcp(const std::string& host, int port, Clock::time_point deadline, const std::string& what) {
  auto pause = std::chrono::milliseconds(5);
  std::string last_error = "nothing tried";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
    if (rc == 0) {
      for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        Socket s = try_connect(*ai, deadline, err);
        if (s.valid()) {
          ::freeaddrinfo(list);
          return s;
        }
        last_error = std::strerror(err);
      }
      ::freeaddrinfo(list);
    } else {
      // A name that does not exist will not start existing: fail now. Anything else (EAI_AGAIN: the
      // resolver is busy) may pass, so retry.
      MT_CHECK(rc != EAI_NONAME, what, ": cannot resolve host '", host, "': ", ::gai_strerror(rc));
      last_error = ::gai_strerror(rc);
    }
    // Nobody listens yet (ECONNREFUSED) or the network is slow: the server may start late. Retry with
    // a growing pause, so hundreds of ranks do not hammer a server that is still starting.
    // The last pause ends at the deadline, so a caller waiting in slices (Note [Waiting out loud])
    // gets slices of the length it asked for.
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  MT_FAIL_TIMEOUT(what, ": could not connect to ", host, ":", port, " before the timeout (last error: ",
                  last_error, "); is the process hosting the store (rank 0 or the launcher) running, "
                  "and are MASTER_ADDR and MASTER_PORT right?");
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    const int ready = ::poll(&pfd, 1, poll_timeout_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    MT_CHECK(ready >= 0, what, ": poll: ", std::strerror(errno));
    if (ready == 0) MT_FAIL_TIMEOUT(what, ": could not send a request before the timeout");
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    MT_CHECK(sent > 0, what, ": connection lost while sending (", std::strerror(errno),
             "); the process hosting the store may have exited");
    p += sent;
    n -= static_cast<size_t>(sent);
  }
}

bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  size_t got = 0;
  while (got < n) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, poll_timeout_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    MT_CHECK(ready >= 0, what, ": poll: ", std::strerror(errno));
    if (ready == 0) MT_FAIL_TIMEOUT(what, ": no reply before the timeout");
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r == 0 && got == 0) return false;
    MT_CHECK(r > 0, what, ": connection lost while receiving (",
             r == 0 ? "closed by the other side" : std::strerror(errno),
             "); the process hosting the store may have exited");
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace detail

uint64_t raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlimit raised{.rlim_cur = limit.rlim_max, .rlim_max = limit.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur;
}

int find_free_port() {
  detail::Socket s = detail::listen_tcp(0);
  return detail::local_port(s);
}

}  // namespace mt::dist
