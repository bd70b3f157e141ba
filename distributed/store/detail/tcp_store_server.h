// The TCPStore server: one thread, one poll() loop, every client connection non-blocking. It keeps the
// key-value map and answers the requests of store_protocol.h. TCPStore (tcp_store.h) starts one when
// asked to host; users never touch this class.
//
// Note [Waiters]: a Get or Wait for keys that are not set yet parks its connection. The server
// remembers, per missing key, which parked requests want it (waiters_), and counts down each request's
// missing keys as they are set, so a barrier of n ranks costs O(n) per set instead of rescanning every
// parked request. A request that timed out leaves stale entries behind; the request serial tells them
// apart from a newer request of the same connection.
//
// Note [Strangers]: a process that connects and never says Hello (a port scanner, a stray client of
// an earlier job) is closed after hello_timeout, never counts when the server waits for its clients
// before closing, and is the first to go when the connections reach max_connections (a full table
// refuses newcomers with one log line, instead of stalling the job's own ranks). Strangers are
// capped on their own too: at most max_strangers (64) unauthenticated connections at once, and no
// more than 8 once the process has fewer than fd_reserve (64) free descriptors below RLIMIT_NOFILE
// (a newcomer is heard out to be told from the job's client, so a few still come in). The
// store lives in rank 0, which needs descriptors of its own (Gloo's sockets, checkpoint files, the
// data loader's workers); a flood of strangers must not take them. At either cap the oldest stranger
// gives way (once heard out, below); when none can, the server stops accepting for a moment, and
// the newcomers wait in the listener's queue, which costs the process no descriptor, instead of
// being refused: the job's own client may be among them. When the process runs out of file
// descriptors all the same (EMFILE: another part of the process took them), the server stops
// accepting for a moment instead of spinning on a listener that stays readable, and says so once.
// mini_train raises its soft RLIMIT_NOFILE to the hard limit at start (raise_descriptor_limit in
// tcp_store.h), so that the reserve is taken from a large budget.
//
// Note [Hear a connection out before shedding it]: a connection is a stranger only once the server
// has read what it sent. accept_clients() takes every connection waiting in the listener's queue
// before any of them is read, so under a flood the job's own client (the hosting rank's connects
// first, the moment the port listens) can sit accepted, its Hello unread in the socket, when the
// descriptors run out; shedding it then ended the job ("the server did not accept this client
// (connection reset by peer)"). So make_room() first reads and handles what the oldest candidate
// has sent, and sheds it only if it is still not authenticated. A job client that has connected
// but not yet written its Hello cannot be told from a stranger; it writes the Hello right after
// connecting, though, so a connection is shed only once it has had `speak_up` (50 ms) to say it.
// Under a flood the strangers get those 50 ms too, so the server frees descriptors in bursts
// (tests/distributed/test_store.cpp still admits the job's client in under 4 s behind 100
// strangers at `ulimit -n 48`).
//
// Not here: persistence, key deletion, TLS. The job token (Note [Job token] in tcp_store.h) keeps
// strangers out; it is not encryption.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distributed/store/detail/socket.h"
#include "distributed/store/store.h"
#include "distributed/store/detail/store_protocol.h"

namespace mt::dist::detail {

struct TCPStoreServerOptions {
  int port = 0;                   // 0: the kernel picks; read it with port()
  std::string token{};
  std::chrono::milliseconds close_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds hello_timeout = std::chrono::seconds(5);  // Note [Strangers]
  // A fresh connection's time to say Hello before it may be shed (Note [Hear a connection out before
  // shedding it]).
  std::chrono::milliseconds speak_up = std::chrono::milliseconds(50);
  size_t max_connections = 1024;  // open client connections at once
  size_t max_strangers = 64;      // of them, not yet authenticated (Note [Strangers])
  int fd_reserve = 64;            // descriptors below RLIMIT_NOFILE that strangers never take
  bool loopback_only = false;     // listen on 127.0.0.1 only (a single-machine job)
};

class TCPStoreServer {
 public:
  // Listens and starts serving.
  explicit TCPStoreServer(TCPStoreServerOptions opts);
  // Keeps serving until every client has disconnected or close_timeout has passed, then stops: the
  // hosting rank often finishes first, and its peers may still be reading their last keys.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Pending {        // a parked Get or Wait (Note [Waiters])
    Op op;
    std::vector<std::string> keys{};  // deduplicated, in the order asked
    size_t missing = 0;             // how many of `keys` are not set yet
    uint64_t serial = 0;
    Clock::time_point deadline{};
  };
  struct Client {
    Socket sock;
    Bytes in;                 // bytes received, not yet handled
    Bytes out;                // replies not yet sent
    size_t out_sent = 0;
    bool authenticated = false;  // has shown the job token
    bool hang_up = false;        // close once `out` is sent
    bool dead = false;           // closed; erased at the end of the loop turn
    // When accept() took it: a stranger is closed hello_timeout later (Note [Strangers]), and not
    // shed before speak_up (Note [Hear a connection out before shedding it]).
    Clock::time_point accepted{};
    std::optional<Pending> pending;
  };

  void run();
  void serve();
  void accept_clients();
  bool make_room();  // Note [Strangers]: closes the oldest stranger, once heard out; false if there is none
  bool room_for_a_stranger();  // Note [Strangers]: below max_strangers and above the descriptor reserve
  void say(const std::string& line, Clock::time_point& last_said);
  void read_from(Client& c);
  void handle_frames(uint64_t id, Client& c);
  void handle(uint64_t id, Client& c, FrameReader& r);
  void hello(Client& c, FrameReader& r);  // a client's first frame: protocol and job token
  void add(Client& c, FrameReader& r);    // Op::Add: integer keys
  void park(uint64_t id, Client& c, Op op, std::vector<std::string> keys, int64_t timeout_ms);
  void notify(const std::string& key);
  void complete(Client& c);
  void expire(Clock::time_point now);
  void reply(Client& c, Bytes frame);
  void flush(Client& c);

  TCPStoreServerOptions opts_;
  Clock::time_point accept_paused_until_{};  // after EMFILE (Note [Strangers])
  // When each log line was last printed.
  Clock::time_point said_full_{}, said_emfile_{}, said_strangers_{}, said_token_{};
  Socket listener_;
  int port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe; the destructor writes to it to interrupt poll()
  std::atomic<bool> stop_{false};

  // Touched by the server thread only.
  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> waiters_;  // key -> (client, serial)
  std::map<uint64_t, Client> clients_;
  uint64_t next_client_ = 0;
  uint64_t next_serial_ = 0;

  std::thread thread_;
};

}  // namespace mt::dist::detail
