// Ranks watching each other through the store (see peer_heartbeat.h).
#include "apps/mini_train/peer_heartbeat.h"

#include <cstdio>
#include <cstdlib>

namespace mt::app {

std::unique_ptr<dist::StoreHeartbeat> peer_heartbeat(const Options& o, const std::optional<dist::RendezvousInfo>& rdv,
                                                     const dist::ProcessGroup* pg) {
  if (!pg || !rdv || rdv->world_size < 2 || o.heartbeat_timeout == 0) return nullptr;
  if (std::getenv("MT_HEARTBEAT_FD") || pg->backend() == "mpi") return nullptr;  // see peer_heartbeat.h
  const std::chrono::seconds timeout(o.heartbeat_timeout);
  const int rank = rdv->rank;
  return std::make_unique<dist::StoreHeartbeat>(
      dist::connect_job_store(*rdv, timeout), rank, rdv->world_size,
      dist::StoreHeartbeatOptions{.timeout = timeout, .on_stopped = [rank](const std::string& line) {
        // A rank blocked in a collective with the stopped one cannot unwind: this thread ends the
        // process, as the launcher would have ended it.
        std::fprintf(stderr, "mini_train: rank %d: %s. Ending the job\n", rank, line.c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(1);
      }});
}

}  // namespace mt::app
