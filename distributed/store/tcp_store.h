// TCPStore: a Store served over TCP. One process hosts the server (rank 0, or a launcher that starts
// the ranks); every rank, the host included, talks to it through a client connection.
//
//   // rank 0                                            // every other rank
//   TCPStore store({.host = "10.0.0.1", .port = 29500,   TCPStore store({.host = "10.0.0.1",
//                   .is_server = true});                                 .port = 29500});
//   store.set("greeting", "hello");                      store.get_string("greeting");  // waits
//
// Clients retry connecting until the timeout, so ranks may start in any order; a client still not
// connected after notices.every says so, naming the address (Note [Waiting out loud]). The wire format and
// its limits are detail/store_protocol.h; the server loop is detail/tcp_store_server.h.
//
// Note [Job token]: every client must first present the job's token (TCPStoreOptions::job_token, or
// the MT_JOB_TOKEN environment variable; empty when neither is set). The server answers a wrong token
// with an error and hangs up, and the client throws saying so. This keeps a stray process from an
// earlier job, or a port scanner, from joining or confusing a job; it is a shared secret, not
// encryption: anyone who can read the traffic or the environment can read the token too.
//
// Thread safety: one request at a time per TCPStore object (a mutex); a blocking get() or wait() holds
// it, so threads that must wait independently should each have their own TCPStore client.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "distributed/store/store.h"

namespace mt::dist {

namespace detail {
class Socket;
class TCPStoreServer;
}

struct TCPStoreOptions {
  std::string host{};            // where the server is (a name or an address); required
  int port = 0;                  // the server's port; a hosting store may pass 0 to let the kernel pick
  bool is_server = false;        // host the server in this process (and connect to it)
  std::optional<std::string> job_token{};  // Note [Job token]; default: $MT_JOB_TOKEN, else empty
  std::chrono::milliseconds timeout = kDefaultTimeout;  // connecting, and the default for get/wait
  // A hosting store, when destroyed, keeps serving until every client has hung up or this much time
  // has passed: the host (rank 0) often finishes first while its peers still read their last keys.
  std::chrono::milliseconds close_timeout = std::chrono::seconds(10);
  // Hosting: a connection that has not said Hello after this is closed; at most max_connections
  // at once, max_strangers of them not yet authenticated, and fd_reserve descriptors left to the
  // process (Note [Strangers] in detail/tcp_store_server.h); listen on 127.0.0.1 only (single machine).
  std::chrono::milliseconds hello_timeout = std::chrono::seconds(5);
  std::chrono::milliseconds speak_up = std::chrono::milliseconds(50);  // never shed before this
  size_t max_connections = 1024;
  size_t max_strangers = 64;
  int fd_reserve = 64;
  bool loopback_only = false;
  // What connecting (and later get/wait/barrier) say while they wait long (Note [Waiting out loud]).
  WaitNotices notices{};
};

// A port that was free a moment ago: binds port 0 on all interfaces, reads the port the kernel chose,
// closes the socket. Another process could take it before the caller binds it; for tests and
// launchers on one machine that window is harmless in practice (torchrun does the same).
int find_free_port();

// Raises this process's soft RLIMIT_NOFILE to its hard limit (a host's store then keeps its
// descriptor reserve out of a large budget: Note [Strangers] in detail/tcp_store_server.h); returns the
// soft limit now in force. A program calls it once at start; the library never changes limits by
// itself.
uint64_t raise_descriptor_limit();

class TCPStore : public Store {
 public:
  explicit TCPStore(TCPStoreOptions opts);
  ~TCPStore() override;

  const std::string& host() const { return host_; }
  int port() const { return port_; }  // the server's port (the one chosen, when hosting with port 0)
  std::string describe() const override;

 protected:
  void set_impl(const std::string& key, const Bytes& value) override;
  bool get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) override;
  int64_t add_impl(const std::string& key, int64_t delta) override;
  bool check_impl(const std::vector<std::string>& keys) override;
  std::vector<std::string> wait_impl(const std::vector<std::string>& keys,
                                     std::chrono::milliseconds timeout) override;

 private:
  // Sends one request frame and returns the reply's body; `reply_deadline` bounds the wait.
  Bytes request(const Bytes& frame, Clock::time_point reply_deadline);
  void hello(const std::string& token, Clock::time_point deadline);

  std::string host_;
  int port_ = 0;
  std::unique_ptr<detail::TCPStoreServer> server_;  // when hosting; destroyed after the client socket
  std::mutex mutex_;                                // one request at a time
  std::unique_ptr<detail::Socket> socket_;  // detail/socket.h
};

}  // namespace mt::dist
