// Heartbeats through the store (see heartbeat_store.h, Note [Store heartbeat]).
#include "distributed/fault/heartbeat_store.h"

#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "distributed/fault/heartbeat.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/torch_store.h"

namespace mt::dist {

namespace {

constexpr const char* kStopped = "heartbeat/stopped";
std::string beat_key(int rank) { return "heartbeat/" + std::to_string(rank); }

// What a watcher knows of one watched rank.
struct Watched {
  std::string value;           // the last value read ("" before the first beat)
  Clock::time_point changed;   // when it last changed
};

// "backward, bucket 2, step 17" from "<seq> <phase> <bucket> <step>".
std::string phase_of(const std::string& value) {
  std::istringstream in(value);
  uint64_t seq = 0;
  uint32_t phase = 0;
  int64_t bucket = -1, step = 0;
  if (!(in >> seq >> phase >> bucket >> step)) return "unknown (unreadable heartbeat '" + value + "')";
  return describe_phase(static_cast<Phase>(phase), bucket, step);
}

std::string seconds(Clock::duration d) {
  char s[32];
  std::snprintf(s, sizeof s, "%.0f", std::chrono::duration<double>(d).count());
  return s;
}

}  // namespace

struct StoreHeartbeat::State {
  std::shared_ptr<Store> store;
  int rank, world;
  StoreHeartbeatOptions opts;
  std::mutex mutex;
  std::condition_variable cv;
  bool stopping = false;
  std::thread thread;
  std::map<int, Watched> watched;
  uint64_t seq = 0;
  Clock::time_point last_answer = Clock::now();

  // One beat and one look at the others; the line to report, or "".
  std::string beat() {
    const Clock::time_point now = Clock::now();
    try {
      std::ostringstream v;
      const PhaseNow p = current_phase();
      v << ++seq << ' ' << static_cast<uint32_t>(p.phase) << ' ' << p.bucket << ' ' << p.step;
      store->set(beat_key(rank), v.str());
      for (auto& [peer, w] : watched) {
        const std::string key = beat_key(peer);
        const std::string value = store->check({key}) ? store->get_string(key) : std::string();
        if (value == "done") continue;  // it finished: not a stopped rank
        if (value != w.value) w.value = value, w.changed = now;
        if (now - w.changed <= opts.timeout) continue;
        const std::string line = "rank " + std::to_string(peer) + " stopped: no heartbeat in the store for " +
                                 seconds(now - w.changed) + " s (--heartbeat-timeout " + seconds(opts.timeout) +
                                 "; the process is stopped or frozen, e.g. by SIGSTOP). Its last phase: " +
                                 (w.value.empty() ? "starting (no heartbeat yet)" : phase_of(w.value)) +
                                 " (seen by rank " + std::to_string(rank) + ")";
        store->set(kStopped, line);
        return line;
      }
      last_answer = Clock::now();
      if (store->check({kStopped})) return store->get_string(kStopped);
    } catch (const Error& e) {
      if (Clock::now() - last_answer > opts.timeout)
        return "the store (" + store->describe() + ") has not answered rank " + std::to_string(rank) + " for " +
               seconds(Clock::now() - last_answer) + " s (--heartbeat-timeout " + seconds(opts.timeout) +
               "): its host, rank 0 unless a launcher or torchrun hosts it, is stopped or gone (" + e.what() + ")";
    }
    return "";
  }
};

StoreHeartbeat::StoreHeartbeat(std::shared_ptr<Store> store, int rank, int world_size, StoreHeartbeatOptions opts)
    : state_(std::make_unique<State>()) {
  MT_CHECK(store != nullptr, "StoreHeartbeat: no store");
  MT_CHECK(rank >= 0 && rank < world_size, "StoreHeartbeat: rank ", rank, " is outside 0..", world_size - 1);
  MT_CHECK(opts.timeout.count() > 0 && opts.every.count() > 0, "StoreHeartbeat: the timeout and the interval "
           "must be positive, got ", format_ms(opts.timeout), " and ", format_ms(opts.every));
  MT_CHECK(opts.on_stopped != nullptr, "StoreHeartbeat: on_stopped is required");
  State* s = state_.get();
  s->store = std::move(store), s->rank = rank, s->world = world_size, s->opts = std::move(opts);
  const Clock::time_point now = Clock::now();  // silence counts from the start
  if (rank == 0)
    for (int peer = 1; peer < world_size; ++peer) s->watched[peer] = {"", now};
  if (rank == 1) s->watched[0] = {"", now};
  s->thread = std::thread([s] {
    std::unique_lock<std::mutex> lock(s->mutex);
    while (!s->stopping) {
      lock.unlock();
      const std::string line = s->beat();
      lock.lock();
      if (!line.empty() && !s->stopping) {
        lock.unlock();
        // The watcher that named the rank gives the others two beats to read the line while the
        // store (often in this very process, rank 0) still serves.
        if (line.rfind("rank ", 0) == 0 && line.find("(seen by rank " + std::to_string(s->rank) + ")") !=
                                               std::string::npos)
          std::this_thread::sleep_for(2 * s->opts.every);
        s->opts.on_stopped(line);
        return;
      }
      s->cv.wait_for(lock, s->opts.every, [s] { return s->stopping; });
    }
  });
}

StoreHeartbeat::~StoreHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
  try {
    state_->store->set(beat_key(state_->rank), "done");  // finished, not stopped (Note [Store heartbeat])
  } catch (const Error&) {
    // The store is gone (its host finished first): nobody is left to watch this rank.
  }
}

std::shared_ptr<Store> connect_job_store(const RendezvousInfo& info, std::chrono::milliseconds timeout) {
  MT_CHECK(info.master_port > 0, "connect_job_store: rank ", info.rank, " has no MASTER_PORT");
  if (process_env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True")
    return std::make_shared<PrefixStore>(
        "minitrain/" + process_env("TORCHELASTIC_RESTART_COUNT").value_or("0"),
        std::make_shared<TorchTCPStore>(
            TorchTCPStoreOptions{.host = info.master_addr, .port = info.master_port, .timeout = timeout}));
  std::shared_ptr<Store> store = std::make_shared<TCPStore>(
      TCPStoreOptions{.host = info.master_addr, .port = info.master_port, .timeout = timeout});
  if (info.store_prefix.empty()) return store;
  return std::make_shared<PrefixStore>(info.store_prefix, store);  // Note [Launcher-hosted store] in init_process_group.cpp
}

}  // namespace mt::dist
