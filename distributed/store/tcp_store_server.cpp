// The TCPStore server's poll loop (see detail/tcp_store_server.h; the wire format is detail/store_protocol.h).
#include "distributed/store/detail/tcp_store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_set>

namespace mt::dist::detail {

namespace {

// Compares in time independent of where the strings differ, so the reply time does not leak how much
// of a guessed token was right.
bool same_token(const std::string& a, const std::string& b) {
  uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

// Strangers the descriptor reserve still lets in at once (Note [Strangers]): a newcomer must be
// accepted and heard out to be told from the job's own client, and a few at a time let the job's
// client, queued behind a flood, get in soon.
constexpr size_t kStrangersInReserve = 8;

// "10.0.0.2" (IPv4 or IPv6), or "an unknown address".
std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  char host[NI_MAXHOST] = {};
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "an unknown address";
  const std::string_view mapped = "::ffff:";  // an IPv4 client of a dual-stack listener
  return std::string_view(host).starts_with(mapped) ? std::string(host + mapped.size()) : std::string(host);
}

Bytes status_frame(Status s) { return FrameWriter().u8(static_cast<uint8_t>(s)).frame(); }

Bytes error_frame(const std::string& message) {
  return FrameWriter().u8(static_cast<uint8_t>(Status::Error)).str(message).frame();
}

std::vector<std::string> read_keys(FrameReader& r) {
  const uint32_t n = r.u32();
  std::vector<std::string> keys;
  keys.reserve(std::min<uint32_t>(n, 1024));  // n is not trusted: each key is read (and checked) below
  for (uint32_t i = 0; i < n; ++i) keys.push_back(r.str(kMaxKeyBytes));
  return keys;
}

}  // namespace

TCPStoreServer::TCPStoreServer(TCPStoreServerOptions opts)
    : opts_(std::move(opts)), listener_(listen_tcp(opts_.port, opts_.loopback_only)) {
  port_ = local_port(listener_);
  set_nonblocking(listener_.fd());
  MT_CHECK(::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) == 0, "TCPStore server: pipe: ", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop_ = true;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_[1], &byte, 1);
  thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TCPStoreServer::run() {
  try {
    serve();
  } catch (const std::exception& e) {
    // Only an out-of-memory or a broken poll() gets here. The clients see the connection close; this
    // line says why (the thread has no caller to throw to).
    std::fprintf(stderr, "TCPStore server on port %d stopped: %s\n", port_, e.what());
  }
}

void TCPStoreServer::serve() {
  std::optional<Clock::time_point> close_deadline;
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (true) {
    if (stop_ && !close_deadline) close_deadline = Clock::now() + opts_.close_timeout;
    // Only the job's own clients are waited for (Note [Strangers]).
    const bool clients_left =
        std::any_of(clients_.begin(), clients_.end(), [](const auto& e) { return e.second.authenticated; });
    if (close_deadline && (!clients_left || Clock::now() >= *close_deadline)) return;

    const Clock::time_point now = Clock::now();
    const bool accepting = now >= accept_paused_until_;
    fds.assign({pollfd{wake_[0], POLLIN, 0}, pollfd{listener_.fd(), static_cast<short>(accepting ? POLLIN : 0), 0}});
    ids.clear();
    std::optional<Clock::time_point> wake_at = close_deadline;
    const auto wake_by = [&](Clock::time_point t) {
      if (!wake_at || t < *wake_at) wake_at = t;
    };
    if (!accepting) wake_by(accept_paused_until_);
    for (auto& [id, c] : clients_) {
      const short events = static_cast<short>(POLLIN | (c.out_sent < c.out.size() ? POLLOUT : 0));
      fds.push_back(pollfd{c.sock.fd(), events, 0});
      ids.push_back(id);
      if (c.pending) wake_by(c.pending->deadline);
      if (!c.authenticated) wake_by(c.accepted + opts_.hello_timeout);
    }
    const int ready = ::poll(fds.data(), fds.size(), wake_at ? poll_timeout_ms(*wake_at) : -1);
    MT_CHECK(ready >= 0 || errno == EINTR, "poll: ", std::strerror(errno));

    if (fds[0].revents) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof(drain)) > 0) {}
    }
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[i + 2].revents;
      Client& c = clients_.at(ids[i]);
      if (c.dead) continue;
      if (ev & (POLLIN | POLLHUP | POLLERR)) read_from(c);
      if (!c.dead && (ev & POLLOUT)) flush(c);
    }
    for (auto& [id, c] : clients_)
      if (!c.dead) handle_frames(id, c);
    expire(Clock::now());
    std::erase_if(clients_, [](const auto& entry) { return entry.second.dead; });
  }
}

void TCPStoreServer::say(const std::string& line, Clock::time_point& last_said) {
  const Clock::time_point now = Clock::now();
  if (last_said != Clock::time_point{} && now - last_said < std::chrono::seconds(10)) return;  // once per 10 s
  last_said = now;
  std::fprintf(stderr, "TCPStore server on port %d: %s\n", port_, line.c_str());
  std::fflush(stderr);
}

bool TCPStoreServer::make_room() {
  const Clock::time_point now = Clock::now();
  for (auto& [id, c] : clients_) {  // ordered by id: the oldest first
    // A fresh one first gets time to say Hello (Note [Hear a connection out before shedding it]).
    if (c.authenticated || c.dead || now - c.accepted < opts_.speak_up) continue;
    // Note [Hear a connection out before shedding it]
    read_from(c);
    if (!c.dead) handle_frames(id, c);
    if (c.authenticated && !c.dead) continue;
    c.dead = true;
    c.sock.close();
    return true;
  }
  return false;
}

bool TCPStoreServer::room_for_a_stranger() {
  const size_t strangers = static_cast<size_t>(std::count_if(
      clients_.begin(), clients_.end(), [](const auto& e) { return !e.second.dead && !e.second.authenticated; }));
  if (strangers >= opts_.max_strangers) return false;
  if (strangers < kStrangersInReserve) return true;
  // The lowest free descriptor number: every one below it is open. One at the edge of the reserve
  // means the process has at most fd_reserve left.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return true;
  const int lowest_free = ::fcntl(listener_.fd(), F_DUPFD_CLOEXEC, 0);
  if (lowest_free < 0) return false;  // EMFILE: none left at all
  ::close(lowest_free);
  return static_cast<rlim_t>(lowest_free) + static_cast<rlim_t>(opts_.fd_reserve) < limit.rlim_cur;
}

void TCPStoreServer::accept_clients() {
  while (true) {
    // A newcomer may be a stranger: past either of their caps, the oldest stranger gives way, or the
    // newcomers wait in the listener's queue for a moment (Note [Strangers]).
    if (!room_for_a_stranger() && !make_room()) {
      accept_paused_until_ = Clock::now() + opts_.speak_up;
      say("at the cap on connections that have not said Hello (" + std::to_string(opts_.max_strangers) +
          ", or within " + std::to_string(opts_.fd_reserve) + " descriptors of `ulimit -n`): new ones wait; "
          "another process holding connections to this port?", said_strangers_);
      return;
    }
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
      // The listener stays readable while the descriptors are gone (Note [Strangers]): pause
      // instead of spinning, and free one from a stranger if there is one.
      const int error = errno;  // make_room() reads from sockets
      const bool freed = make_room();
      accept_paused_until_ = Clock::now() + std::chrono::milliseconds(freed ? 0 : 100);
      say(std::string("out of file descriptors (") + std::strerror(error) + "): pausing new connections; raise "
          "`ulimit -n`, or look for a process holding connections to this port", said_emfile_);
      return;
    }
    if (fd < 0) return;  // EAGAIN: no more waiting; other errors are retried next turn
    const size_t open = static_cast<size_t>(
        std::count_if(clients_.begin(), clients_.end(), [](const auto& e) { return !e.second.dead; }));
    if (open >= opts_.max_connections && !make_room()) {
      ::close(fd);
      say(std::to_string(open) + " connections open, the limit: refusing new ones (another process holding "
          "connections to this port?)", said_full_);
      continue;
    }
    set_nodelay(fd);
    Client& c = clients_[next_client_++];
    c.sock = Socket(fd);
    c.accepted = Clock::now();
  }
}

void TCPStoreServer::read_from(Client& c) {
  uint8_t buf[64 * 1024];
  while (true) {
    const ssize_t n = ::recv(c.sock.fd(), buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      // One request in flight per client: more than one full frame buffered is a misbehaving peer.
      if (c.in.size() > kFrameHeaderBytes + kMaxFrameBytes) c.dead = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;  // end of stream or a reset: the client has gone
    return;
  }
}

void TCPStoreServer::handle_frames(uint64_t id, Client& c) {
  while (!c.pending && !c.hang_up && c.in.size() >= kFrameHeaderBytes) {
    const uint32_t n = read_u32_le(c.in.data());
    // Judge the length before waiting for (and buffering) the body (Note [Bounded frames]).
    const size_t limit = c.authenticated ? kMaxFrameBytes : kMaxHelloBytes;
    if (n > limit) {
      c.hang_up = true;  // before reply(): the hang-up happens once the reply is out
      reply(c, error_frame("message of " + std::to_string(n) + " bytes exceeds the store's limit of " +
                           std::to_string(limit)));
      return;
    }
    if (c.in.size() < kFrameHeaderBytes + n) return;
    FrameReader r(c.in.data() + kFrameHeaderBytes, n);
    try {
      handle(id, c, r);
    } catch (const Error& e) {  // malformed or refused: say why, then hang up
      c.hang_up = true;
      reply(c, error_frame(e.what()));
    }
    c.in.erase(c.in.begin(), c.in.begin() + kFrameHeaderBytes + n);
  }
}

void TCPStoreServer::handle(uint64_t id, Client& c, FrameReader& r) {
  const auto op = static_cast<Op>(r.u8());
  if (!c.authenticated) {
    MT_CHECK(op == Op::Hello, "the first message to a store must be Hello");
    hello(c, r);
    return;
  }
  switch (op) {
    case Op::Set: {
      std::string key = r.str(kMaxKeyBytes);
      Bytes value = r.bytes(kMaxValueBytes);
      MT_CHECK(r.done(), "malformed Set");
      data_[key] = std::move(value);
      reply(c, status_frame(Status::Ok));
      notify(key);
      return;
    }
    case Op::Get: {
      const int64_t timeout_ms = r.i64();
      std::string key = r.str(kMaxKeyBytes);
      MT_CHECK(r.done(), "malformed Get");
      park(id, c, Op::Get, {std::move(key)}, timeout_ms);
      return;
    }
    case Op::Add:
      add(c, r);
      return;
    case Op::Check: {
      const std::vector<std::string> keys = read_keys(r);
      MT_CHECK(r.done(), "malformed Check");
      const bool all = std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
      reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::Ok)).u8(all ? 1 : 0).frame());
      return;
    }
    case Op::Wait: {
      const int64_t timeout_ms = r.i64();
      std::vector<std::string> keys = read_keys(r);
      MT_CHECK(r.done(), "malformed Wait");
      park(id, c, Op::Wait, std::move(keys), timeout_ms);
      return;
    }
    default:
      MT_FAIL("unknown store request type ", static_cast<int>(op));
  }
}

void TCPStoreServer::hello(Client& c, FrameReader& r) {
  const uint32_t magic = r.u32(), version = r.u32();
  MT_CHECK(magic == kStoreMagic, "this is a minitrain TCPStore; the client speaks another protocol");
  MT_CHECK(version == kStoreProtocolVersion, "store protocol version ", version, " is not supported (the "
           "server speaks ", kStoreProtocolVersion, "); are all ranks running the same build?");
  const std::string token = r.str(kMaxTokenBytes);
  MT_CHECK(r.done(), "malformed Hello");
  if (!same_token(token, opts_.token)) {
    // The client hears why it is refused; so does this side, which would otherwise see only a rank
    // that never arrived (its node exported another MT_JOB_TOKEN).
    say("refused a client from " + peer_address(c.sock.fd()) + ": wrong job token (export the same MT_JOB_TOKEN "
        "on every node)", said_token_);
    MT_FAIL("wrong job token: this store belongs to another job, or MT_JOB_TOKEN differs between this process "
            "and the one hosting the store");
  }
  c.authenticated = true;
  reply(c, status_frame(Status::Ok));
}

void TCPStoreServer::add(Client& c, FrameReader& r) {
  std::string key = r.str(kMaxKeyBytes);
  const int64_t delta = r.i64();
  MT_CHECK(r.done(), "malformed Add");
  int64_t value = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    const char* first = reinterpret_cast<const char*>(it->second.data());
    const char* last = first + it->second.size();
    const auto [end, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || end != last || first == last) {
      // The caller's mistake, not the connection's: answer, and keep serving this client.
      reply(c, error_frame("add('" + key + "'): the key holds a value that is not an integer"));
      return;
    }
  }
  value += delta;
  const std::string text = std::to_string(value);
  data_[key] = Bytes(text.begin(), text.end());
  reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::Ok)).i64(value).frame());
  notify(key);
}

void TCPStoreServer::park(uint64_t id, Client& c, Op op, std::vector<std::string> keys, int64_t timeout_ms) {
  std::unordered_set<std::string> seen;
  std::erase_if(keys, [&](const std::string& k) { return !seen.insert(k).second; });
  Pending p{.op = op, .keys = std::move(keys)};
  for (const auto& k : p.keys) p.missing += data_.count(k) == 0;
  c.pending = std::move(p);
  if (c.pending->missing == 0) return complete(c);
  // Note [Waiters]
  c.pending->serial = ++next_serial_;
  const auto capped = std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, int64_t{1} << 40));
  c.pending->deadline = Clock::now() + capped;
  for (const auto& k : c.pending->keys)
    if (data_.count(k) == 0) waiters_[k].emplace_back(id, c.pending->serial);
}

void TCPStoreServer::notify(const std::string& key) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const auto waiting = std::move(it->second);
  waiters_.erase(it);
  for (const auto& [id, serial] : waiting) {
    const auto c = clients_.find(id);
    if (c == clients_.end() || c->second.dead || !c->second.pending || c->second.pending->serial != serial)
      continue;  // gone, or a stale entry of a request that timed out
    if (--c->second.pending->missing == 0) complete(c->second);
  }
}

void TCPStoreServer::complete(Client& c) {
  if (c.pending->op == Op::Get)
    reply(c, FrameWriter().u8(static_cast<uint8_t>(Status::Ok)).bytes(data_.at(c.pending->keys[0])).frame());
  else
    reply(c, status_frame(Status::Ok));
  c.pending.reset();
}

void TCPStoreServer::expire(Clock::time_point now) {
  for (auto& [id, c] : clients_) {
    if (!c.dead && !c.authenticated && now >= c.accepted + opts_.hello_timeout) {  // a stranger (Note [Strangers])
      c.dead = true;
      continue;
    }
    if (c.dead || !c.pending || c.pending->deadline > now) continue;
    // The server, not the client, ends a request that waited too long (Note [Server-side timeouts]).
    FrameWriter w;
    w.u8(static_cast<uint8_t>(Status::Timeout));
    if (c.pending->op == Op::Wait) {
      std::vector<std::string> missing;
      for (const auto& k : c.pending->keys)
        if (data_.count(k) == 0) missing.push_back(k);
      w.u32(static_cast<uint32_t>(missing.size()));
      for (const auto& k : missing) w.str(k);
    }
    c.pending.reset();
    reply(c, w.frame());
  }
}

void TCPStoreServer::reply(Client& c, Bytes frame) {
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  flush(c);
}

void TCPStoreServer::flush(Client& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n = ::send(c.sock.fd(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // poll() says when to go on
    if (n <= 0) {
      c.dead = true;
      return;
    }
    c.out_sent += static_cast<size_t>(n);
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.hang_up) c.dead = true;
}

}  // namespace mt::dist::detail
