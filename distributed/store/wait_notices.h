// WaitNotices: what a long rendezvous wait says while it waits. A store wait (connecting to the
// store, a barrier, a get) that has not finished after `every` prints one line naming what it waits
// for, and again every `every` until it ends or times out.
//
// Note [Waiting out loud]: a rank that never starts, a MASTER_ADDR that no machine answers at, or a
// port that a firewall drops all look the same from inside a rendezvous: nothing happens until the
// timeout (300 s by default). A line every 10 s naming the ranks not yet arrived, or the address
// still not answering, tells the operator at once which of these it is, without shortening the
// timeout that slow schedulers need. Only waits longer than `every` speak, so a healthy job prints
// nothing.
//
// Not here: the waits of collectives (they have their own timeout and error), logging levels.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include "distributed/errors.h"

namespace mt::dist {

struct WaitNotices {
  std::chrono::milliseconds every = std::chrono::seconds(10);
  std::string who{};  // "rank 1 of 4": starts each line; empty: nothing
  // Where the lines go; empty: one line on stderr, "minitrain: <who>: <line>".
  std::function<void(const std::string& line)> print{};

  void say(const std::string& line) const;
};

// "12 s of 300 s": how a notice says how long it has waited.
std::string format_waited(Clock::time_point start, Clock::time_point deadline);

// The loop of Note [Waiting out loud]: calls attempt(slice_deadline) with deadlines `every` apart
// (the last one `deadline`) until it returns true or the last slice is done, and after every other
// slice that failed says describe(start, deadline). Returns attempt's last answer.
template <typename Attempt, typename Describe>
bool wait_in_slices(const WaitNotices& notices, Clock::time_point deadline, Attempt&& attempt,
                    Describe&& describe) {
  const Clock::time_point start = Clock::now();
  while (true) {
    const Clock::time_point slice = std::min(deadline, Clock::now() + notices.every);
    if (attempt(slice)) return true;
    if (slice >= deadline) return false;  // that was the last slice
    notices.say(describe(start, deadline));
  }
}

}  // namespace mt::dist
