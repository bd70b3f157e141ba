// CollectiveQueue: the one worker thread on which a backend runs its collectives, in the order they
// were issued (Note [Collective order] in work.h). Gloo, synchronous underneath, uses it to become
// asynchronous; DDP relies on that to overlap communication with the rest of backward. (MPI has
// non-blocking collectives of its own, issued on the caller's thread and moved by a progress
// thread: Note [Progress thread] in process_group_mpi.cpp.) Private to the backends: not installed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/process_group/work.h"

namespace mt::dist::detail {

// How long a thread polls before it sleeps (Note [Hand-offs spin, then sleep] in work.h): a few
// small collectives' worth.
constexpr auto kSpinFor = std::chrono::microseconds(100);

// Polls `ready` until it returns true or kSpinFor has passed; returns what it last returned.
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto deadline = Clock::now() + kSpinFor;
  while (!ready()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::yield();  // lets a thread that shares this core (the peer rank's, under load) run
  }
  return true;
}

// Note [A failed collective poisons the queue]: when a collective fails (a peer died, or timed out),
// the ranks no longer agree on what was exchanged and the transport may be half-broken. Every later
// collective then fails at once with an error that names the first failure, instead of each waiting out
// its own timeout against a peer that is gone.
class CollectiveQueue {
 public:
  // Starts the worker thread. SIGPIPE is blocked on it (Note [SIGPIPE] in collective_queue.cpp), and so on every
  // thread it creates: a backend creates its transport's threads from a pushed task for that reason
  // (or from a thread that blocks SIGPIPE the same way, as Gloo's connect_gloo does).
  CollectiveQueue();
  // Fails the collectives that have not started yet, waits for the running one, joins the thread.
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Runs `run` on the worker thread after everything pushed before it, then finishes `work` with its
  // outcome (an exception thrown by `run` becomes the work's error).
  void push(std::shared_ptr<Work> work, std::function<void()> run);

 private:
  struct Item {
    std::shared_ptr<Work> work;
    std::function<void()> run;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::atomic<size_t> queued_{0};  // items_.size(), readable without the lock
  bool sleeping_ = false;          // the worker waits on cv_: push must wake it
  bool stopping_ = false;
  std::exception_ptr first_failure_;  // Note [A failed collective poisons the queue]
  std::string first_failure_name_;
  std::thread thread_;
};

}  // namespace mt::dist::detail
