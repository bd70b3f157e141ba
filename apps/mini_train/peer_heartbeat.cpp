// Ranks watching each other through the store (see peer_heartbeat.h).
#include "apps/mini_train/peer_heartbeat.h"

#include <cstdio>
#include <cstdlib>

#include "distributed/process_group_mpi.h"
#include "distributed/tcp_store.h"

namespace mt::app {

std::unique_ptr<dist::StoreHeartbeat> peer_heartbeat(const Options& o, const std::optional<dist::RendezvousInfo>& rdv,
                                                     const dist::ProcessGroup* pg) {
  if (!pg || o.heartbeat_timeout == 0 || pg->size() < 2 || std::getenv("MT_HEARTBEAT_FD")) return nullptr;
  const std::chrono::seconds timeout(o.heartbeat_timeout);
  const int rank = pg->rank();
  std::shared_ptr<dist::Store> store;
  if (pg->backend() != "mpi") {
    store = dist::connect_job_store(*rdv, timeout);
  } else {
    // MPI ranks have no job store: only the --nproc launcher's heartbeat store, when it hosts one.
    const char* at = std::getenv("MT_HEARTBEAT_STORE");
    if (!at || !*at) return nullptr;
    const std::string where = at;
    const size_t colon = where.rfind(':');
    MT_CHECK(colon != std::string::npos && colon + 1 < where.size(), "MT_HEARTBEAT_STORE='", where,
             "' is not HOST:PORT (it is set by mini_train's launcher)");
    store = std::make_shared<dist::TCPStore>(dist::TCPStoreOptions{
        .host = where.substr(0, colon), .port = std::atoi(where.c_str() + colon + 1), .timeout = timeout});
  }
  return std::make_unique<dist::StoreHeartbeat>(
      store, rank, pg->size(),
      dist::StoreHeartbeatOptions{.timeout = timeout, .on_stopped = [rank](const std::string& line) {
        // A rank blocked in a collective with the stopped one cannot unwind: this thread ends the
        // process, as the launcher would have ended it.
        std::fprintf(stderr, "mini_train: rank %d: %s. Ending the job\n", rank, line.c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        dist::ProcessGroupMPI::abort_job(1);  // Note [A failing rank aborts the job]; nothing without MPI
        std::_Exit(1);
      }});
}

}  // namespace mt::app
