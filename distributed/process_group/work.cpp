// Work (completion + timed wait) and CollectiveQueue (one worker thread, FIFO). See work.h.
#include "distributed/process_group/work.h"

#include <signal.h>

#include "trace/tracer.h"

namespace mt::dist {

namespace {

// How long a thread polls before it sleeps (Note [Hand-offs spin, then sleep]): a few small
// collectives' worth.
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

// Note [Errors are copied to the waiter]: the collective's error object was made on the queue's
// thread and is shared, through exception_ptr, by the Work and every waiter. The last owner frees it
// on its own thread, often the queue's (`pg->barrier()->wait()` drops the caller's Work during the
// unwinding), while a waiter may still read its what(). The reference count that orders the two
// lives inside libstdc++, where ThreadSanitizer cannot see it, so it reports a race on every such
// failure (the "peer that exits mid-collective" test failed 10 runs in 10 under TSan). So a waiter
// gets its own copy, made on its thread: same type, same message; other exception types pass as is.
[[noreturn]] void rethrow_as_own(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string(e.what()));
  } catch (const Error& e) {
    throw Error(std::string(e.what()));
  }
}

}  // namespace

Work::Work(std::string description, std::chrono::milliseconds timeout)
    : description_(std::move(description)), timeout_(timeout) {}

bool Work::is_completed() const { return done_.load(std::memory_order_acquire); }

void Work::wait(std::chrono::milliseconds timeout) {
  spin_until([&] { return done_.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_.load(std::memory_order_relaxed); }))
    MT_FAIL_TIMEOUT(description_, " did not complete within ", format_ms(timeout),
                    "; a peer may have died or not issued the same collective (Note [Collective order])");
  if (error_) rethrow_as_own(error_);
}


void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    finished_ns_.store(trace::now_ns(), std::memory_order_release);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

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
        MT_FAIL(item.work->description(), " was not run: an earlier collective failed: ", first_failure_name_);
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

}  // namespace mt::dist
