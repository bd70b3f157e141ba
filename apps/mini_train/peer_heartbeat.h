// mini_train's heartbeat when no launcher of its own watches it (torchrun, srun, RANK/WORLD_SIZE set
// by hand): the ranks watch each other through the job's store (Note [Store heartbeat] in
// distributed/fault/heartbeat_store.h). A stopped rank ends the job within --heartbeat-timeout + ~3 s, on
// every rank, with the line "mini_train: rank R: rank S stopped: ... Its last phase: ...".
// Under mini_train's launcher (MT_HEARTBEAT_FD) the pipe to the launcher does this (heartbeat.h).
// MPI ranks meet without a store: under `mini_train --nproc N --backend mpi` the launcher hosts one
// for their heartbeats (MT_HEARTBEAT_STORE=host:port); under a bare mpirun rank 0 does, when every
// rank runs on its host (Note [Heartbeats under a bare mpirun], peer_heartbeat.cpp).
#pragma once

#include <memory>
#include <optional>

#include "apps/mini_train/options.h"
#include "distributed/fault/heartbeat_store.h"
#include "distributed/process_group/process_group.h"
#include "distributed/store/rendezvous.h"

namespace mt::app {

// The heartbeat for this rank, or null when there is nothing to watch or a launcher watches.
std::unique_ptr<dist::StoreHeartbeat> peer_heartbeat(const Options& opts, const std::optional<dist::RendezvousInfo>& rdv,
                                                     dist::ProcessGroup* pg);

}  // namespace mt::app
