// Store: the small key-value store that processes use to find each other before any collective exists
// (rendezvous). Rank r publishes something under a key; the others wait for that key. Gloo publishes
// each rank's listening address this way; a launcher can count arrivals with add().
//
//   TCPStore    (tcp_store.h)   a server thread hosted by rank 0 or by a launcher; every rank a client
//   FileStore   (file_store.h)  one file on a filesystem every rank can see
//   PrefixStore (below)         a namespace inside another store, so that two users never share keys
//
// Values are bytes. add() keeps a decimal integer in the value ("3"), as PyTorch's stores do, so get()
// of a counter reads as text.
//
// Not a database: keys are never deleted or watched, there is no compare-and-set, and nothing here is
// meant for moving tensors. Keys and values are bounded (kMaxKeyBytes, kMaxValueBytes): a store is
// shared with every rank of a job, and a bug that writes a gigabyte should fail at once, on its own rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/errors.h"
#include "distributed/store/wait_notices.h"

namespace mt::dist {

using Bytes = std::vector<uint8_t>;

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{16} << 20;  // 16 MiB

class PrefixStore;

class Store {
 public:
  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout);
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  void set(const std::string& key, const Bytes& value);
  void set(const std::string& key, std::string_view value);
  // The value of `key`, waiting until some process sets it. A TimeoutError names the key and timeout.
  Bytes get(const std::string& key);
  Bytes get(const std::string& key, std::chrono::milliseconds timeout);
  std::string get_string(const std::string& key);
  // Adds `delta` to the integer kept under `key` (a missing key counts as 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Whether every key is set, right now, without waiting.
  bool check(const std::vector<std::string>& keys);
  // Waits until every key is set. A TimeoutError lists the keys that never were.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // A barrier through the store, for setup code that runs before any process group exists: rank
  // `rank` sets "<name>/<rank>" and waits for the keys of all `world_size` ranks. Because each rank has
  // its own key, a timeout can say which ranks never arrived ("ranks 2, 3 of 4"). Keys are never
  // deleted, so each barrier needs its own name.
  void barrier(const std::string& name, int rank, int world_size);
  void barrier(const std::string& name, int rank, int world_size, std::chrono::milliseconds timeout);

  // The default timeout of get(), wait() and barrier().
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout);
  // What get(), wait() and barrier() say while they wait long (Note [Waiting out loud]).
  const WaitNotices& wait_notices() const { return notices_; }
  void set_wait_notices(WaitNotices notices);

  // Names this store in messages: "TCPStore 10.0.0.1:29500", "FileStore /shared/job7.store".
  virtual std::string describe() const = 0;

 protected:
  // What each implementation provides. Keys and values arrive checked against the limits above.
  virtual void set_impl(const std::string& key, const Bytes& value) = 0;
  // The value, or false when `key` was still not set after `timeout`.
  virtual bool get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) = 0;
  virtual int64_t add_impl(const std::string& key, int64_t delta) = 0;
  virtual bool check_impl(const std::vector<std::string>& keys) = 0;
  // Returns the keys that were still not set after `timeout` (empty: all were set).
  virtual std::vector<std::string> wait_impl(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout) = 0;

 private:
  friend class PrefixStore;  // forwards to the *_impl of the store it wraps
  std::chrono::milliseconds timeout_;
  WaitNotices notices_{};
};

// Every key of `inner` seen through this store starts with "<prefix>/". Two process groups (or a group
// and a launcher) sharing one TCPStore each get their own PrefixStore, so their keys never collide.
class PrefixStore : public Store {
 public:
  // The timeout and the wait notices start as inner's.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  std::string describe() const override;
  const std::shared_ptr<Store>& inner() const { return inner_; }

 protected:
  void set_impl(const std::string& key, const Bytes& value) override;
  bool get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) override;
  int64_t add_impl(const std::string& key, int64_t delta) override;
  bool check_impl(const std::vector<std::string>& keys) override;
  std::vector<std::string> wait_impl(const std::vector<std::string>& keys,
                                     std::chrono::milliseconds timeout) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }
  std::string prefix_;  // with the trailing '/'
  std::shared_ptr<Store> inner_;
};

}  // namespace mt::dist
