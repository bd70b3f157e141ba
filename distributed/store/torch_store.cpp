// TorchTCPStore (see torch_store.h, Note [PyTorch's TCPStore protocol]).
#include "distributed/store/torch_store.h"

#include <algorithm>
#include <thread>

#include "distributed/store/detail/socket.h"

namespace mt::dist {

namespace {

enum class Query : uint8_t { Set = 0, Get = 2, Add = 3, Check = 4 };

// A request being built: the query byte, then its arguments in PyTorch's encoding.
class Request {
 public:
  explicit Request(Query q) { bytes_.push_back(static_cast<uint8_t>(q)); }
  Request& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Request& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Request& data(const uint8_t* p, size_t n) {
    u64(n);
    bytes_.insert(bytes_.end(), p, p + n);
    return *this;
  }
  Request& key(const std::string& k) {  // PyTorch's clients prefix every key with "/"
    const std::string full = "/" + k;
    return data(reinterpret_cast<const uint8_t*>(full.data()), full.size());
  }
  const Bytes& bytes() const { return bytes_; }

 private:
  Bytes bytes_;
};

uint64_t read_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

TorchTCPStore::TorchTCPStore(TorchTCPStoreOptions opts)
    : Store(opts.timeout), host_(opts.host), port_(opts.port), socket_(std::make_unique<detail::Socket>()) {
  MT_CHECK(!host_.empty(), "TorchTCPStore: no host given (MASTER_ADDR of torchrun's store)");
  MT_CHECK(port_ > 0 && port_ <= 65535, "TorchTCPStore: port ", port_, " is not in [1, 65535]");
  set_wait_notices(opts.notices);
  const Clock::time_point deadline = Clock::now() + opts.timeout;
  wait_in_slices(
      opts.notices, deadline,
      [&](Clock::time_point slice) {
        try {
          *socket_ = detail::connect_tcp(host_, port_, slice, describe());
          return true;
        } catch (const TimeoutError&) {
          if (slice >= deadline) throw;
          return false;
        }
      },
      [&](Clock::time_point start, Clock::time_point end) {
        return "waited " + format_waited(start, end) + " for PyTorch's TCPStore (torchrun's agent) at " + host_ +
               ":" + std::to_string(port_) + ": nothing answers there yet";
      });
}

TorchTCPStore::~TorchTCPStore() = default;

std::string TorchTCPStore::describe() const {
  return "PyTorch TCPStore " + host_ + ":" + std::to_string(port_);
}

void TorchTCPStore::send(const Bytes& request) {
  MT_CHECK(socket_->valid(), describe(), ": the connection to the server was lost earlier");
  try {
    detail::send_all(socket_->fd(), request.data(), request.size(), Clock::now() + timeout(), describe());
  } catch (...) {
    socket_->close();  // half a request may have gone out: the stream is out of step
    throw;
  }
}

void TorchTCPStore::receive(void* data, size_t n) {
  try {
    MT_CHECK(detail::recv_all(socket_->fd(), data, n, Clock::now() + timeout(), describe()), describe(),
             ": the server closed the connection (torchrun's agent, which hosts it, may have exited)");
  } catch (...) {
    socket_->close();
    throw;
  }
}

bool TorchTCPStore::all_set(const std::vector<std::string>& keys) {
  Request r(Query::Check);
  r.u64(keys.size());
  for (const auto& k : keys) r.key(k);
  send(r.bytes());
  uint8_t answer = 1;
  receive(&answer, 1);
  MT_CHECK(answer <= 1, describe(), ": unexpected reply ", int{answer}, " to CHECK");
  return answer == 0;
}

void TorchTCPStore::set_impl(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  Request r(Query::Set);
  r.key(key).data(value.data(), value.size());
  send(r.bytes());
}

bool TorchTCPStore::get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) {
  if (!wait_impl({key}, timeout).empty()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Request r(Query::Get);
  r.key(key);
  send(r.bytes());
  uint8_t header[8];
  receive(header, sizeof header);
  const uint64_t n = read_u64(header);
  MT_CHECK(n <= kMaxValueBytes, describe(), ": value of ", n, " bytes for key '", key, "' exceeds the limit of ",
           kMaxValueBytes);
  value.resize(static_cast<size_t>(n));
  if (n > 0) receive(value.data(), value.size());
  return true;
}

int64_t TorchTCPStore::add_impl(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  Request r(Query::Add);
  r.key(key).i64(delta);
  send(r.bytes());
  uint8_t reply[8];
  receive(reply, sizeof reply);
  return static_cast<int64_t>(read_u64(reply));
}

bool TorchTCPStore::check_impl(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  return all_set(keys);
}

std::vector<std::string> TorchTCPStore::wait_impl(const std::vector<std::string>& keys,
                                                  std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (all_set(keys)) return {};
      if (Clock::now() >= deadline) {  // which ones: one CHECK each
        std::vector<std::string> missing;
        for (const auto& k : keys)
          if (!all_set({k})) missing.push_back(k);
        return missing;
      }
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace mt::dist
