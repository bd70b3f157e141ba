// WaitNotices: the default printer and the duration format (see wait_notices.h).
#include "distributed/store/wait_notices.h"

#include <cstdio>

namespace mt::dist {

void WaitNotices::say(const std::string& line) const {
  const std::string full = who.empty() ? line : who + ": " + line;
  if (print) return print(full);
  std::fprintf(stderr, "minitrain: %s\n", full.c_str());
  std::fflush(stderr);
}

std::string format_waited(Clock::time_point start, Clock::time_point deadline) {
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  const auto now = Clock::now();
  return std::to_string(duration_cast<seconds>(now - start).count()) + " s of " +
         std::to_string(duration_cast<seconds>(deadline - start + std::chrono::milliseconds(500)).count()) + " s";
}

}  // namespace mt::dist
