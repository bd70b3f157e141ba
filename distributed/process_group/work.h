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
// How a backend completes a Work is its own: Gloo's run on a worker thread
// (detail/collective_queue.h), MPI's requests are tested by a progress thread, NCCL's by an event.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "distributed/errors.h"

namespace mt::dist {

class Work {
 public:
  // `description` names the collective in errors ("allreduce #3 (11 float32, Sum) on rank 0 of 2");
  // `timeout` is what wait() waits by default.
  Work(std::string description, std::chrono::milliseconds timeout);
  virtual ~Work() = default;

  // Finished, successfully or not. Never blocks.
  virtual bool is_completed() const;
  // Blocks until finished; throws the collective's error, or TimeoutError when it has not finished
  // within `timeout` (by default the process group's). Backends whose collectives complete somewhere
  // other than a CollectiveQueue (MPI requests, CUDA events) override these two.
  void wait() { wait(timeout_); }
  virtual void wait(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& description() const { return description_; }

  // For backends: mark the work finished, with the error it failed with (or none).
  void finish(std::exception_ptr error = nullptr);
  // When finish() ran, in trace::now_ns()'s clock (trace/tracer.h); 0 before, and for backends
  // that complete elsewhere (NCCL's events). A trace draws a bucket's all-reduce ending here, not
  // when someone got round to waiting for it.
  int64_t finished_ns() const { return finished_ns_.load(std::memory_order_acquire); }

 private:
  const std::string description_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  // Set once, under mutex_ (so that a waiter cannot miss the notification), and read without it by
  // is_completed() and the polling in wait() (Note [Hand-offs spin, then sleep]).
  std::atomic<bool> done_{false};
  std::atomic<int64_t> finished_ns_{0};
  std::exception_ptr error_;
};

// Note [Collective order]: collectives pair up across ranks by the order in which they are issued, so
// every rank must issue the same collectives in the same order (DDP's buckets, Note [Bucket launch
// order], exist to guarantee it). The queue keeps the caller's order: one thread, first in, first out.
//
// Note [Hand-offs spin, then sleep]: a small collective takes tens of microseconds, about what it
// costs to wake a sleeping thread. So the two hand-offs around it (caller -> worker when it is
// issued, worker -> caller when it completes) would double its latency if each went through a
// condition variable.
// Instead the worker, having finished a collective, polls for the next one for a short while before
// it sleeps (collectives come in bursts: one backward's buckets), and Work::wait() polls for
// completion for a short while before it sleeps. The polls are short (kSpinFor in
// detail/collective_queue.h), so an idle process group costs no CPU.

}  // namespace mt::dist
