// Errors and timeouts of the distributed layer. Everything here throws mt::Error (tensor/check.h), like
// the rest of the library. A wait that ran out of time throws TimeoutError, a subclass, so that a
// launcher or a test can tell "a peer never came" from "a peer said no"; a connection that a peer
// closed throws PeerLostError, so that a rank can tell "I failed because another did" from its own
// failure (Note [The first failure is the one reported] in distributed/fault/heartbeat.h). Every message names what was
// waited for (the key, the collective, the ranks) and how long.
#pragma once

#include <chrono>
#include <string>

#include "tensor/check.h"

namespace mt::dist {

class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer closed its connection (it exited, or failed and closed it on purpose): this rank's failure
// is a consequence of another's.
class PeerLostError : public Error {
 public:
  using Error::Error;
};

// How long store operations and collectives wait unless told otherwise: long enough for ranks that
// start minutes apart (a busy scheduler, a slow filesystem), short enough that a job whose peer died
// ends by itself instead of holding its machines forever. PyTorch's store default is the same.
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

using Clock = std::chrono::steady_clock;

// "3000 ms": how every message in this layer writes a duration.
inline std::string format_ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace mt::dist

// Like MT_FAIL, but throws mt::dist::TimeoutError.
#define MT_FAIL_TIMEOUT(...) \
  ::mt::detail::fail_with<::mt::dist::TimeoutError>(__FILE__, __LINE__, __VA_ARGS__)
// Like MT_FAIL, but throws mt::dist::PeerLostError.
#define MT_FAIL_PEER_LOST(...) \
  ::mt::detail::fail_with<::mt::dist::PeerLostError>(__FILE__, __LINE__, __VA_ARGS__)
