// Store's checks and messages, written once for every implementation, and PrefixStore.
#include "distributed/store/store.h"

#include <algorithm>

namespace mt::dist {

namespace {

void check_key(const Store& store, const std::string& key) {
  MT_CHECK(!key.empty(), store.describe(), ": empty key");
  MT_CHECK(key.size() <= kMaxKeyBytes, store.describe(), ": key '", key.substr(0, 64), "...' has ",
           key.size(), " bytes; keys are limited to ", kMaxKeyBytes);
}

// "'a', 'b' and 3 more": a long list of missing keys would bury the message.
std::string list_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

}  // namespace

Store::Store(std::chrono::milliseconds timeout) : timeout_(timeout) { set_timeout(timeout); }

void Store::set_timeout(std::chrono::milliseconds timeout) {
  MT_CHECK(timeout.count() > 0, "store timeout must be positive, got ", format_ms(timeout));
  timeout_ = timeout;
}

void Store::set_wait_notices(WaitNotices notices) {
  MT_CHECK(notices.every.count() > 0, "store wait notices: the interval must be positive, got ",
           format_ms(notices.every));
  notices_ = std::move(notices);
}

namespace {

// The time left until `deadline`, as a timeout for one *_impl call (at least 1 ms).
std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

void Store::set(const std::string& key, const Bytes& value) {
  check_key(*this, key);
  MT_CHECK(value.size() <= kMaxValueBytes, describe(), ": value for key '", key, "' has ", value.size(),
           " bytes; values are limited to ", kMaxValueBytes);
  set_impl(key, value);
}

void Store::set(const std::string& key, std::string_view value) {
  set(key, Bytes(value.begin(), value.end()));
}

Bytes Store::get(const std::string& key) { return get(key, timeout_); }

Bytes Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(*this, key);
  Bytes value;
  const bool got = wait_in_slices(
      notices_, Clock::now() + timeout, [&](Clock::time_point slice) { return get_impl(key, left(slice), value); },
      [&](Clock::time_point start, Clock::time_point deadline) {
        return describe() + ": waited " + format_waited(start, deadline) + " for key '" + key + "'";
      });
  if (!got)
    MT_FAIL_TIMEOUT(describe(), ": get('", key, "') timed out after ", format_ms(timeout),
                    ": no process set that key");
  return value;
}

std::string Store::get_string(const std::string& key) {
  const Bytes value = get(key);
  return std::string(value.begin(), value.end());
}

int64_t Store::add(const std::string& key, int64_t delta) {
  check_key(*this, key);
  return add_impl(key, delta);
}

bool Store::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) check_key(*this, key);
  return check_impl(keys);
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& key : keys) check_key(*this, key);
  std::vector<std::string> missing = keys;
  wait_in_slices(
      notices_, Clock::now() + timeout,
      [&](Clock::time_point slice) { return (missing = wait_impl(missing, left(slice))).empty(); },
      [&](Clock::time_point start, Clock::time_point deadline) {
        return describe() + ": waited " + format_waited(start, deadline) + " for " + list_keys(missing);
      });
  if (!missing.empty())
    MT_FAIL_TIMEOUT(describe(), ": wait timed out after ", format_ms(timeout), "; ", missing.size(),
                    " of ", keys.size(), " keys were never set: ", list_keys(missing));
}

void Store::barrier(const std::string& name, int rank, int world_size) {
  barrier(name, rank, world_size, timeout_);
}

void Store::barrier(const std::string& name, int rank, int world_size,
                    std::chrono::milliseconds timeout) {
  MT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, describe(), ": barrier '", name,
           "': rank ", rank, " is not in [0, ", world_size, ")");
  const std::string base = name + "/";
  set(base + std::to_string(rank), std::string_view("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(base + std::to_string(r));
  for (const auto& key : keys) check_key(*this, key);
  // Each rank has its own key, so the missing keys are the missing ranks.
  std::vector<std::string> missing = keys;
  const auto missing_ranks = [&] {
    std::string ranks;
    for (const auto& key : missing) ranks += (ranks.empty() ? "" : ", ") + key.substr(base.size());
    return (missing.size() == 1 ? "rank " : "ranks ") + ranks + " of " + std::to_string(world_size);
  };
  const bool all = wait_in_slices(
      notices_, Clock::now() + timeout,
      [&](Clock::time_point slice) { return (missing = wait_impl(missing, left(slice))).empty(); },
      [&](Clock::time_point start, Clock::time_point deadline) {
        return describe() + ": barrier '" + name + "': waited " + format_waited(start, deadline) + " for " +
               missing_ranks() + " to arrive";
      });
  if (all) return;
  MT_FAIL_TIMEOUT(describe(), ": barrier '", name, "' timed out after ", format_ms(timeout), " on rank ",
                  rank, "; ", missing_ranks(), " never arrived");
}

// ---- PrefixStore ----------------------------------------------------------------------------------

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : Store(inner ? inner->timeout() : kDefaultTimeout), prefix_(std::move(prefix) + "/"),
      inner_(std::move(inner)) {
  MT_CHECK(inner_ != nullptr, "PrefixStore '", prefix_, "': no store to wrap");
  set_wait_notices(inner_->wait_notices());
  MT_CHECK(prefix_.size() < kMaxKeyBytes, "PrefixStore: prefix of ", prefix_.size(), " bytes is too long");
}

std::string PrefixStore::describe() const { return inner_->describe() + " (prefix '" + prefix_ + "')"; }

void PrefixStore::set_impl(const std::string& key, const Bytes& value) {
  inner_->set(full(key), value);
}

bool PrefixStore::get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) {
  check_key(*inner_, full(key));
  return inner_->get_impl(full(key), timeout, value);
}

int64_t PrefixStore::add_impl(const std::string& key, int64_t delta) { return inner_->add(full(key), delta); }

bool PrefixStore::check_impl(const std::vector<std::string>& keys) {
  std::vector<std::string> full_keys;
  for (const auto& key : keys) full_keys.push_back(full(key));
  return inner_->check(full_keys);
}

std::vector<std::string> PrefixStore::wait_impl(const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout) {
  std::vector<std::string> full_keys;
  for (const auto& key : keys) {
    full_keys.push_back(full(key));
    check_key(*inner_, full_keys.back());
  }
  std::vector<std::string> missing = inner_->wait_impl(full_keys, timeout);
  for (auto& key : missing) key.erase(0, prefix_.size());  // report keys as this store's user wrote them
  return missing;
}

}  // namespace mt::dist
