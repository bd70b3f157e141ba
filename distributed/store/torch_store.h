// TorchTCPStore: a client of PyTorch's own TCPStore server, speaking its wire protocol, so that
// workers started by torchrun can meet in the store torchrun's agent already hosts at
// MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True) instead of trying to host one there.
//
//   TorchTCPStore store({.host = "127.0.0.1", .port = 29500});   // torchrun's agent is the server
//   store.set("greeting", "hello");
//
// Note [PyTorch's TCPStore protocol]: as spoken by PyTorch 1.13 (torch/csrc/distributed/c10d/
// TCPStore.cpp) and checked against Debian's python3-torch server (tests/distributed/
// test_torch_store.cpp). A request is a query byte, then its arguments; a string or byte vector is a
// uint64 length (little-endian, as PyTorch writes it on x86 and ARM) and the bytes; an integer is an
// int64. The queries used here:
//   SET   = 0: key, value                   no reply
//   GET   = 2: key                          value (the key must exist: wait for it first)
//   ADD   = 3: key, int64 delta             int64, the new value
//   CHECK = 4: uint64 n, n keys             one byte: 0 every key is set, 1 not
// PyTorch's clients put "/" before every key, and so does this one, so that both see the same keys.
// Waiting polls CHECK with a growing pause (at most 50 ms) rather than using PyTorch's WAIT, whose
// reply comes only once the keys exist: a wait that timed out would leave that reply in the stream.
//
// Not here: hosting (minitrain's own TCPStore hosts; this class only joins PyTorch's), the job token
// (PyTorch's server has none), COMPARE_SET, DELETE_KEY, WATCH_KEY.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "distributed/store/store.h"

namespace mt::dist {

namespace detail {
class Socket;
}

struct TorchTCPStoreOptions {
  std::string host{};  // where PyTorch's TCPStore server is; required
  int port = 0;
  std::chrono::milliseconds timeout = kDefaultTimeout;  // connecting, and the default for get/wait
  WaitNotices notices{};  // Note [Waiting out loud]
};

class TorchTCPStore : public Store {
 public:
  explicit TorchTCPStore(TorchTCPStoreOptions opts);
  ~TorchTCPStore() override;
  std::string describe() const override;

 protected:
  void set_impl(const std::string& key, const Bytes& value) override;
  bool get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) override;
  int64_t add_impl(const std::string& key, int64_t delta) override;
  bool check_impl(const std::vector<std::string>& keys) override;
  std::vector<std::string> wait_impl(const std::vector<std::string>& keys,
                                     std::chrono::milliseconds timeout) override;

 private:
  void send(const Bytes& request);
  void receive(void* data, size_t n);
  bool all_set(const std::vector<std::string>& keys);  // one CHECK; the caller holds mutex_

  std::string host_;
  int port_ = 0;
  std::mutex mutex_;  // one request at a time
  std::unique_ptr<detail::Socket> socket_;  // detail/socket.h
};

}  // namespace mt::dist
