// Ranks watching each other through the store (see peer_heartbeat.h).
#include "apps/mini_train/peer_heartbeat.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "apps/mini_train/workers.h"
#include "distributed/process_group/mpi/process_group_mpi.h"
#include "distributed/store/tcp_store.h"

namespace mt::app {
namespace {

// FNV-1a of this machine's host name: the same on every rank when they share rank 0's host. (Two
// hosts whose names collide, a chance in 2^64, would send a rank to its own loopback, where its
// connect fails with a line naming the store.)
int64_t host_hash() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return 0;
  uint64_t h = 1469598103934665603ull;
  for (const char* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

// Note [Heartbeats under a bare mpirun]
// `mpirun -np N mini_train` starts the ranks with no launcher of ours and no store: MPI ranks meet
// through MPI itself. So rank 0 hosts a store for the heartbeats alone, as the --nproc launcher does
// for its mpirun (loopback only, a fresh job token), and one MPI broadcast, before training starts,
// hands its port and token to the others. Loopback reaches only the ranks on rank 0's host, so first
// every rank compares its host name's hash with rank 0's; when any differs (a hostfile spreads the
// ranks over machines) there is no heartbeat, rank 0 says so once, and a stopped rank is found by
// the collective timeout (--timeout). Every rank takes the same path: the options and environment
// that lead here are mpirun's, the same on all ranks, so the collectives below pair up.
std::shared_ptr<dist::Store> bare_mpirun_store(dist::ProcessGroup& pg, std::chrono::milliseconds timeout, bool quiet) {
  const int64_t mine = host_hash();
  Tensor host = from_vector(std::vector<int64_t>{mine}, {1});
  pg.broadcast(host, 0)->wait();
  Tensor elsewhere = from_vector(std::vector<int64_t>{host.to_vector<int64_t>()[0] != mine}, {1});
  pg.allreduce(elsewhere)->wait();
  if (elsewhere.to_vector<int64_t>()[0] != 0) {
    if (pg.rank() == 0 && !quiet)
      std::fprintf(stderr, "mini_train: note: no heartbeats: this mpirun's ranks run on more than one host, and "
                   "a stopped rank is found only by --timeout (mini_train --nproc N --backend mpi watches its ranks)\n");
    return nullptr;
  }
  // From rank 0: [port, the token's 32 bytes (random_token's hex digits) as 4 words].
  std::shared_ptr<dist::TCPStore> server;
  std::vector<int64_t> where(5, 0);
  if (pg.rank() == 0) {
    const std::string token = random_token();
    server = std::make_shared<dist::TCPStore>(dist::TCPStoreOptions{
        .host = "127.0.0.1", .port = 0, .is_server = true, .job_token = token, .timeout = timeout, .loopback_only = true});
    where[0] = server->port();
    std::memcpy(&where[1], token.data(), 32);
  }
  Tensor shared = from_vector(where, {5});
  pg.broadcast(shared, 0)->wait();
  if (server) return server;  // rank 0 beats over its own hosting store
  where = shared.to_vector<int64_t>();
  std::string token(32, '\0');
  std::memcpy(token.data(), &where[1], 32);
  return std::make_shared<dist::TCPStore>(dist::TCPStoreOptions{
      .host = "127.0.0.1", .port = static_cast<int>(where[0]), .job_token = token, .timeout = timeout});
}

}  // namespace

std::unique_ptr<dist::StoreHeartbeat> peer_heartbeat(const Options& o, const std::optional<dist::RendezvousInfo>& rdv,
                                                     dist::ProcessGroup* pg) {
  if (!pg || o.heartbeat_timeout == 0 || pg->size() < 2) return nullptr;
  const std::chrono::seconds timeout(o.heartbeat_timeout);
  const int rank = pg->rank();
  std::shared_ptr<dist::Store> store;
  if (pg->backend() != "mpi") store = dist::connect_job_store(*rdv, timeout);
  else store = bare_mpirun_store(*pg, timeout, o.quiet);  // Note [Heartbeats under a bare mpirun]
  if (!store) return nullptr;
  return std::make_unique<dist::StoreHeartbeat>(
      store, rank, pg->size(),
      dist::StoreHeartbeatOptions{.timeout = timeout, .on_stopped = [rank](const std::string& line) {
        // A rank blocked in a collective with the stopped one cannot unwind: this thread ends the
        // process, as the launcher would have ended it.
        // The stopped rank itself, should it run again before it is killed, says nothing: its
        // watchers speak for it.
        if (line.rfind("rank " + std::to_string(rank) + " stopped", 0) != 0)
          std::fprintf(stderr, "mini_train: rank %d: %s. Ending the job\n", rank, line.c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        dist::ProcessGroupMPI::abort_job(1);  // Note [A failing rank aborts the job]; nothing without MPI
        std::_Exit(1);
      }});
}

}  // namespace mt::app
