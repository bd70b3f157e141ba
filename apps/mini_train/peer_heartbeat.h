// mini_train's heartbeat when no launcher of its own watches it (torchrun, srun, RANK/WORLD_SIZE set
// by hand): the ranks watch each other through the job's store (Note [Store heartbeat] in
// distributed/fault/heartbeat_store.h). A stopped rank ends the job within --heartbeat-timeout + ~3 s, on
// every rank, with the line "mini_train: rank R: rank S stopped: ... Its last phase: ...".
// Under mini_train's launcher the launcher watches instead (Note [Heartbeat]): its workers beat
// through a pipe, its mpirun's ranks in a store it hosts (MT_HEARTBEAT_STORE). MPI ranks meet
// without a store: under a bare mpirun rank 0 hosts one for their heartbeats, when every rank runs
// on its host (Note [Heartbeats under a bare mpirun], peer_heartbeat.cpp).
#pragma once

#include <memory>
#include <optional>

#include "apps/mini_train/options.h"
#include "distributed/fault/heartbeat_store.h"
#include "distributed/process_group/process_group.h"
#include "distributed/store/rendezvous.h"

namespace mt::app {

// The heartbeat for this rank, or null when there is nothing to watch. Not called under a launcher.
std::unique_ptr<dist::StoreHeartbeat> peer_heartbeat(const Options& opts, const std::optional<dist::RendezvousInfo>& rdv,
                                                     dist::ProcessGroup* pg);

}  // namespace mt::app
