// CollectiveQueue: one worker thread, first in, first out (see detail/collective_queue.h).
#include "distributed/process_group/detail/collective_queue.h"

#include <signal.h>

namespace mt::dist::detail {

CollectiveQueue::CollectiveQueue() : thread_([this] { loop(); }) {}

CollectiveQueue::~CollectiveQueue() {
  std::deque<Item> never_run;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    never_run.swap(items_);
  }
  cv_.notify_all();
  for (auto& item : never_run) {
    try {
      MT_FAIL(item.work->description(), " was not run: its process group was destroyed first");
    } catch (...) {
      item.work->finish(std::current_exception());
    }
  }
  thread_.join();  // a running collective ends by itself, at the latest at its timeout
}

void CollectiveQueue::push(std::shared_ptr<Work> work, std::function<void()> run) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MT_CHECK(!stopping_, work->description(), ": the process group is being destroyed");
    items_.push_back(Item{std::move(work), std::move(run)});
    queued_.store(items_.size(), std::memory_order_release);
    if (!sleeping_) return;  // polling (Note [Hand-offs spin, then sleep]): the worker will see it
  }
  cv_.notify_one();
}

void CollectiveQueue::loop() {
  // Note [SIGPIPE]: a socket write to a peer that has died raises SIGPIPE, whose default action kills
  // the process on the spot, with no message: the opposite of what a collective's error handling is
  // for. SIGPIPE goes to the thread that wrote, so blocking it on this thread (and on the transport's
  // threads, which inherit this thread's mask when created from it) turns it into an EPIPE error,
  // without changing how the rest of the program handles signals.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);

  while (true) {
    Item item;
    spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_ = true;
      cv_.wait(lock, [&] { return stopping_ || !items_.empty(); });
      sleeping_ = false;
      if (items_.empty()) return;  // stopping, nothing left
      item = std::move(items_.front());
      items_.pop_front();
      queued_.store(items_.size(), std::memory_order_release);
    }
    std::exception_ptr error;
    if (first_failure_) {  // Note [A failed collective poisons the queue]
      try {
        // The same kind of failure as the first (Note [The first failure is the one reported] in
        // distributed/fault/heartbeat.h tells a peer's consequence from a rank's own by it).
        try {
          std::rethrow_exception(first_failure_);
        } catch (const PeerLostError&) {
          MT_FAIL_PEER_LOST(item.work->description(), " was not run: an earlier collective failed: ",
                            first_failure_name_);
        } catch (const TimeoutError&) {
          MT_FAIL_TIMEOUT(item.work->description(), " was not run: an earlier collective failed: ",
                          first_failure_name_);
        } catch (...) {
          MT_FAIL(item.work->description(), " was not run: an earlier collective failed: ", first_failure_name_);
        }
      } catch (...) {
        error = std::current_exception();
      }
    } else {
      try {
        item.run();
      } catch (const std::exception& e) {
        error = std::current_exception();
        first_failure_ = error;
        first_failure_name_ = e.what();
      } catch (...) {
        error = std::current_exception();
        first_failure_ = error;
        first_failure_name_ = item.work->description();
      }
    }
    item.run = nullptr;  // release the tensors the task holds before anyone is told it is done
    item.work->finish(error);
  }
}

}  // namespace mt::dist::detail
