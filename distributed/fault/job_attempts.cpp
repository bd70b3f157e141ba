// The launchers' agreement on a job's attempts (see job_attempts.h, Note [Job attempts]).
#include "distributed/fault/job_attempts.h"

#include <cstdio>
#include <thread>

namespace mt::dist {

namespace {

constexpr const char* kEnd = "launch/end";
constexpr const char* kEndCount = "launch/end/count";

std::string attempt_key(int attempt, const std::string& what) {
  return "launch/attempt/" + std::to_string(attempt) + "/" + what;
}
std::string beat_key(int node) { return "launch/beat/" + std::to_string(node); }

std::string seconds(Clock::duration d) {
  char s[32];
  std::snprintf(s, sizeof s, "%.0f", std::chrono::duration<double>(d).count());
  return s;
}

}  // namespace

JobAttempts::JobAttempts(std::shared_ptr<Store> store, JobAttemptsOptions opts)
    : store_(std::move(store)), opts_(std::move(opts)) {
  MT_CHECK(store_ != nullptr, "JobAttempts: no store");
  MT_CHECK(opts_.nnodes >= 1 && opts_.node_rank >= 0 && opts_.node_rank < opts_.nnodes, "JobAttempts: node ",
           opts_.node_rank, " is outside 0..", opts_.nnodes - 1);
  MT_CHECK(opts_.timeout.count() > 0 && opts_.beat_every.count() > 0 && opts_.poll_every.count() > 0,
           "JobAttempts: the timeout and the intervals must be positive");
}

std::string JobAttempts::workers_prefix(int attempt) { return "attempt/" + std::to_string(attempt); }

std::string JobAttempts::nodes(const std::vector<int>& which) const {
  std::string list;
  for (int n : which) list += (list.empty() ? "" : ", ") + std::to_string(n);
  return (which.size() == 1 ? "node " : "nodes ") + list + " of " + std::to_string(opts_.nnodes);
}

std::optional<std::string> JobAttempts::beat() {
  const Clock::time_point now = Clock::now();
  if (opts_.heartbeat_timeout.count() == 0 || opts_.nnodes == 1 || now < next_beat_) return std::nullopt;
  next_beat_ = now + opts_.beat_every;
  if (opts_.node_rank != 0) {
    store_->set(beat_key(opts_.node_rank), std::to_string(++beats_));
    return std::nullopt;
  }
  for (int node = 1; node < opts_.nnodes; ++node) {  // Note [Launcher heartbeats]
    const std::string key = beat_key(node);
    const std::string value = store_->check({key}) ? store_->get_string(key) : "";
    Seen& s = seen_[node];
    if (value != s.value) s = {value, now};
    if (s.value.empty() || now - s.changed <= opts_.heartbeat_timeout) continue;
    const std::string line = "node " + std::to_string(node) + "'s launcher stopped: no heartbeat in the store for " +
                             seconds(now - s.changed) + " s (--heartbeat-timeout " +
                             seconds(opts_.heartbeat_timeout) +
                             "): its machine is gone or unreachable, or the launcher is stopped";
    return line;
  }
  return std::nullopt;
}

std::vector<std::string> JobAttempts::meet(const std::string& name, const std::string& value) {
  const std::string base = "launch/meet/" + name + "/";
  store_->set(base + std::to_string(opts_.node_rank), value);
  const Clock::time_point start = Clock::now(), deadline = start + opts_.timeout;
  Clock::time_point next_notice = start + opts_.notices.every;
  std::vector<int> missing;
  for (int n = 0; n < opts_.nnodes; ++n) missing.push_back(n);
  while (true) {
    std::vector<int> still;
    for (int n : missing)
      if (!store_->check({base + std::to_string(n)})) still.push_back(n);
    missing = still;
    if (missing.empty()) break;
    if (store_->check({kEnd})) throw JobEnded(store_->get_string(kEnd));
    if (const std::optional<std::string> stopped = beat()) {
      end(*stopped);
      throw JobEnded(store_->get_string(kEnd));
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      end(nodes(missing) + " did not come to " + name + " within --timeout " + seconds(opts_.timeout) + " s: " +
          (missing.size() == 1 ? "its launcher is" : "their launchers are") + " not running, or cannot reach " +
          store_->describe());
      throw JobEnded(store_->get_string(kEnd));
    }
    if (now >= next_notice) {
      opts_.notices.say("waited " + format_waited(start, deadline) + " for " + nodes(missing) + " to come to " +
                        name + " at " + store_->describe());
      next_notice = now + opts_.notices.every;
    }
    std::this_thread::sleep_for(opts_.poll_every);
  }
  std::vector<std::string> values;
  for (int n = 0; n < opts_.nnodes; ++n) values.push_back(store_->get_string(base + std::to_string(n)));
  return values;
}

void JobAttempts::fail(int attempt, const std::string& cause) {
  if (store_->add(attempt_key(attempt, "failures"), 1) == 1) store_->set(attempt_key(attempt, "cause"), cause);
}

void JobAttempts::end(const std::string& cause) {
  if (store_->add(kEndCount, 1) == 1) store_->set(kEnd, cause);
}

std::optional<JobStop> JobAttempts::stopped(int attempt) {
  if (store_->check({kEnd})) return JobStop{store_->get_string(kEnd), true};
  const std::string cause = attempt_key(attempt, "cause");
  if (store_->check({cause})) return JobStop{store_->get_string(cause), false};
  return std::nullopt;
}

std::optional<JobStop> JobAttempts::poll(int attempt) {
  if (const std::optional<std::string> stopped_launcher = beat()) fail(attempt, *stopped_launcher);
  return stopped(attempt);
}

JobStop JobAttempts::stop_of(int attempt) {
  const Clock::time_point deadline = Clock::now() + opts_.timeout;
  while (true) {
    if (const std::optional<JobStop> stop = stopped(attempt)) return *stop;
    MT_CHECK(Clock::now() < deadline, "JobAttempts: attempt ", attempt, " stopped, but no cause was posted within ",
             format_ms(opts_.timeout));
    beat();
    std::this_thread::sleep_for(opts_.poll_every);
  }
}

std::optional<JobStop> JobAttempts::finish(int attempt) {
  store_->set(attempt_key(attempt, "done/" + std::to_string(opts_.node_rank)), std::string_view("1"));
  std::vector<std::string> keys;
  for (int n = 0; n < opts_.nnodes; ++n) keys.push_back(attempt_key(attempt, "done/" + std::to_string(n)));
  const Clock::time_point deadline = Clock::now() + opts_.timeout;
  while (!store_->check(keys)) {
    if (const std::optional<JobStop> stop = poll(attempt)) return stop;
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int n = 0; n < opts_.nnodes; ++n)
        if (!store_->check({keys[static_cast<size_t>(n)]})) missing.push_back(n);
      fail(attempt, nodes(missing) + " did not report the end of their workers within --timeout " +
                        seconds(opts_.timeout) + " s of node " + std::to_string(opts_.node_rank) + "'s");
      return stop_of(attempt);
    }
    std::this_thread::sleep_for(opts_.poll_every);
  }
  return std::nullopt;
}

}  // namespace mt::dist
