// TCPStore's client side: one request, one reply (detail/store_protocol.h), under a mutex.
#include "distributed/store/tcp_store.h"

#include <cstdlib>

#include "distributed/store/detail/socket.h"
#include "distributed/store/detail/store_protocol.h"
#include "distributed/store/detail/tcp_store_server.h"

namespace mt::dist {

using detail::FrameReader;
using detail::FrameWriter;
using detail::Op;
using detail::Status;

namespace {

// How much longer than a Get/Wait's own timeout the client listens for the server's Timeout reply
// (Note [Server-side timeouts]) before it concludes that the server itself is gone.
constexpr auto kReplyGrace = std::chrono::seconds(5);

std::string job_token(const TCPStoreOptions& opts) {
  if (opts.job_token) return *opts.job_token;
  const char* env = std::getenv("MT_JOB_TOKEN");
  return env ? env : "";
}

}  // namespace

TCPStore::TCPStore(TCPStoreOptions opts)
    : Store(opts.timeout), host_(opts.host), port_(opts.port), socket_(std::make_unique<detail::Socket>()) {
  MT_CHECK(!host_.empty(), "TCPStore: no host given (the address of the process that hosts the store)");
  MT_CHECK(port_ >= 0 && port_ <= 65535, "TCPStore: port ", port_, " is not in [0, 65535]");
  MT_CHECK(port_ > 0 || opts.is_server, "TCPStore ", host_, ": port 0 only makes sense when hosting");
  const std::string token = job_token(opts);
  MT_CHECK(token.size() <= detail::kMaxTokenBytes, "TCPStore: the job token has ", token.size(),
           " bytes; tokens are limited to ", detail::kMaxTokenBytes);
  if (opts.is_server) {
    server_ = std::make_unique<detail::TCPStoreServer>(
        detail::TCPStoreServerOptions{.port = port_, .token = token, .close_timeout = opts.close_timeout,
                                      .hello_timeout = opts.hello_timeout, .speak_up = opts.speak_up,
                                      .max_connections = opts.max_connections, .max_strangers = opts.max_strangers,
                                      .fd_reserve = opts.fd_reserve, .loopback_only = opts.loopback_only});
    port_ = server_->port();
  }
  set_wait_notices(opts.notices);
  const Clock::time_point deadline = Clock::now() + opts.timeout;
  wait_in_slices(
      opts.notices, deadline,
      [&](Clock::time_point slice) {
        try {
          *socket_ = detail::connect_tcp(host_, port_, slice, describe());
          return true;
        } catch (const TimeoutError&) {
          if (slice >= deadline) throw;  // the last slice's error is the whole wait's
          return false;
        }
      },
      [&](Clock::time_point start, Clock::time_point end) {
        return "waited " + format_waited(start, end) + " for the store at " + host_ + ":" +
               std::to_string(port_) + ", hosted by " + (opts.is_server ? "this process" : "rank 0 or the launcher") +
               ": nothing answers there yet";
      });
  hello(token, deadline);
}

TCPStore::~TCPStore() = default;

std::string TCPStore::describe() const { return "TCPStore " + host_ + ":" + std::to_string(port_); }

void TCPStore::hello(const std::string& token, Clock::time_point deadline) {
  const Bytes frame = FrameWriter()
                          .u8(static_cast<uint8_t>(Op::Hello))
                          .u32(detail::kStoreMagic)
                          .u32(detail::kStoreProtocolVersion)
                          .str(token)
                          .frame();
  Bytes reply;
  try {
    reply = request(frame, deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    // A server that hangs up without a word is not one of ours, or died while we said hello.
    MT_FAIL(describe(), ": the server did not accept this client (", e.what(), ")");
  }
  FrameReader r(reply.data(), reply.size());
  const auto status = static_cast<Status>(r.u8());
  if (status == Status::Error)
    MT_FAIL(describe(), " rejected this process: ", r.str(detail::kMaxFrameBytes),
            ". Set MT_JOB_TOKEN to the same value for every rank and for the process hosting the store.");
  MT_CHECK(status == Status::Ok, describe(), ": unexpected reply to Hello");
}

Bytes TCPStore::request(const Bytes& frame, Clock::time_point reply_deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  MT_CHECK(socket_->valid(), describe(), ": the connection to the server was lost earlier");
  try {
    detail::send_all(socket_->fd(), frame.data(), frame.size(), reply_deadline, describe());
    uint8_t header[detail::kFrameHeaderBytes];
    MT_CHECK(detail::recv_all(socket_->fd(), header, sizeof(header), reply_deadline, describe()), describe(),
             ": the server closed the connection (the process hosting the store, usually rank 0, may have "
             "exited)");
    const uint32_t n = detail::read_u32_le(header);
    MT_CHECK(n >= 1 && n <= detail::kMaxFrameBytes, describe(), ": malformed reply of ", n, " bytes");
    Bytes body(n);
    MT_CHECK(detail::recv_all(socket_->fd(), body.data(), n, reply_deadline, describe()), describe(),
             ": the server closed the connection mid-reply");
    return body;
  } catch (...) {
    // The stream is out of step (half a request sent, or a reply not read): never reuse it.
    socket_->close();
    throw;
  }
}

namespace {

// The reply's status; an Error reply becomes an mt::Error naming the store and the request.
Status read_status(FrameReader& r, const std::string& store, const char* what) {
  const auto status = static_cast<Status>(r.u8());
  if (status == Status::Error) MT_FAIL(store, ": ", what, " failed: ", r.str(detail::kMaxFrameBytes));
  return status;
}

}  // namespace

void TCPStore::set_impl(const std::string& key, const Bytes& value) {
  const Bytes frame = FrameWriter().u8(static_cast<uint8_t>(Op::Set)).str(key).bytes(value).frame();
  const Bytes reply = request(frame, Clock::now() + timeout());
  FrameReader r(reply.data(), reply.size());
  read_status(r, describe(), "set");
}

bool TCPStore::get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) {
  const Bytes frame = FrameWriter().u8(static_cast<uint8_t>(Op::Get)).i64(timeout.count()).str(key).frame();
  const Bytes reply = request(frame, Clock::now() + timeout + kReplyGrace);
  FrameReader r(reply.data(), reply.size());
  if (read_status(r, describe(), "get") == Status::Timeout) return false;
  value = r.bytes(kMaxValueBytes);
  return true;
}

int64_t TCPStore::add_impl(const std::string& key, int64_t delta) {
  const Bytes frame = FrameWriter().u8(static_cast<uint8_t>(Op::Add)).str(key).i64(delta).frame();
  const Bytes reply = request(frame, Clock::now() + timeout());
  FrameReader r(reply.data(), reply.size());
  read_status(r, describe(), "add");
  return r.i64();
}

bool TCPStore::check_impl(const std::vector<std::string>& keys) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Op::Check)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const Bytes reply = request(w.frame(), Clock::now() + timeout());
  FrameReader r(reply.data(), reply.size());
  read_status(r, describe(), "check");
  return r.u8() != 0;
}

std::vector<std::string> TCPStore::wait_impl(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Op::Wait)).i64(timeout.count()).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const Bytes reply = request(w.frame(), Clock::now() + timeout + kReplyGrace);
  FrameReader r(reply.data(), reply.size());
  if (read_status(r, describe(), "wait") == Status::Ok) return {};
  const uint32_t n = r.u32();
  std::vector<std::string> missing;
  for (uint32_t i = 0; i < n; ++i) missing.push_back(r.str(kMaxKeyBytes));
  return missing;
}

}  // namespace mt::dist
