// Work: the handle a collective returns. The collective runs in the background; wait() blocks until it
// has finished, and rethrows its error if it failed. A timeout on every wait: a dead peer ends in a
// TimeoutError naming the collective, never in a hang.
//
//   auto work = pg->allreduce(grad_bucket);   // returns at once
//   ... keep computing ...
//   work->wait();                             // grad_bucket now holds the sum over ranks
//
// Until wait() returns, the tensors given to a collective belong to it: do not read or write them.
//
// CollectiveQueue: the one worker thread on which a backend runs its collectives, in the order they
// were issued (Note [Collective order]). Backends that are synchronous underneath (Gloo, MPI) use it
// to become asynchronous; DDP relies on that to overlap communication with the rest of backward.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/errors.h"

namespace mt::dist {

class Work {
 public:
  // `description` names the collective in errors ("allreduce #3 (11 float32, Sum) on rank 0 of 2");
  // `timeout` is what wait() waits by default.
  Work(std::string description, std::chrono::milliseconds timeout);

  // Finished, successfully or not. Never blocks.
  bool is_completed() const;
  // Blocks until finished; throws the collective's error, or TimeoutError when it has not finished
  // within `timeout` (by default the process group's).
  void wait();
  void wait(std::chrono::milliseconds timeout);
  const std::string& description() const { return description_; }

  // For backends: mark the work finished, with the error it failed with (or none).
  void finish(std::exception_ptr error = nullptr);

 private:
  const std::string description_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Note [Collective order]: collectives pair up across ranks by the order in which they are issued, so
// every rank must issue the same collectives in the same order (DDP's buckets, Note [Bucket launch
// order], exist to guarantee it). The queue keeps the caller's order: one thread, first in, first out.
//
// Note [A failed collective poisons the queue]: when a collective fails (a peer died, or timed out),
// the ranks no longer agree on what was exchanged and the transport may be half-broken. Every later
// collective then fails at once with an error that names the first failure, instead of each waiting out
// its own timeout against a peer that is gone.
class CollectiveQueue {
 public:
  // Starts the worker thread. SIGPIPE is blocked on it (Note [SIGPIPE] in work.cpp), and so on every
  // thread it creates: a backend creates its transport's threads from a pushed task for that reason.
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
  bool stopping_ = false;
  std::exception_ptr first_failure_;  // Note [A failed collective poisons the queue]
  std::string first_failure_name_;
  std::thread thread_;
};

}  // namespace mt::dist
