// LostPeer: which rank a failed Gloo collective lost, and which rank the failure began at, for the
// error line (Note [Naming the lost peer] in lost_peer.cpp). Private to process_group_gloo.cpp; compiled
// only where CMake found Gloo.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace mt::dist::detail {

class LostPeer {
 public:
  // Publishes this rank's ends of its connections in `store` (the group's) and reads every peer's.
  // Collective: every rank of the connected `context` makes one, once connected.
  LostPeer(::gloo::Context& context, std::shared_ptr<Store> store, std::chrono::milliseconds timeout);

  // After Gloo threw `gloo_message` on this rank: names the peer it lost and where the failure began,
  // as a clause for the error line ("" when the message names no peer), and, unless the collective
  // timed out, leaves this rank's notice for the peers that will see its connections close. Call it
  // before closing them.
  std::string explain(const std::string& gloo_message, bool timed_out);

 private:
  // The peer whose address `gloo_message` names, and that address ("127.0.0.1:41234"); -1 if none.
  int rank_in(const std::string& gloo_message, std::string& address) const;

  int rank_;
  std::vector<std::vector<std::string>> ends_;  // by rank: its listening address and its connections' ends
  std::shared_ptr<Store> store_;
};

}  // namespace mt::dist::detail
