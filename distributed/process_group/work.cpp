// Work: completion and the timed wait (see work.h).
#include "distributed/process_group/work.h"

#include "distributed/process_group/detail/collective_queue.h"
#include "trace/tracer.h"

namespace mt::dist {

namespace {

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
  } catch (const PeerLostError& e) {
    throw PeerLostError(std::string(e.what()));
  } catch (const Error& e) {
    throw Error(std::string(e.what()));
  }
}

}  // namespace

Work::Work(std::string description, std::chrono::milliseconds timeout)
    : description_(std::move(description)), timeout_(timeout) {}

bool Work::is_completed() const { return done_.load(std::memory_order_acquire); }

void Work::wait(std::chrono::milliseconds timeout) {
  detail::spin_until([&] { return done_.load(std::memory_order_acquire); });
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

}  // namespace mt::dist
