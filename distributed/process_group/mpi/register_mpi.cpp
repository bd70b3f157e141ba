// The entry that makes init_process_group("mpi") find ProcessGroupMPI, with MPI or without it
// (then is_available() is false and constructing says how to get it).
#include "distributed/process_group/mpi/process_group_mpi.h"
#include "distributed/process_group/backends.h"

// ---- registration: init_process_group("mpi") (Note [Backends register themselves]) ----------------
extern "C" const bool mt_process_group_mpi_registered;
const bool mt_process_group_mpi_registered = mt::dist::register_process_group_backend(
    "mpi", {.available = mt::dist::ProcessGroupMPI::is_available(), .needs_store = false,
            .make = [](const mt::dist::InitOptions& opts, std::shared_ptr<mt::dist::Store>) {
              // The launcher (mpirun, srun) told MPI who is who: no store. A rendezvous that names a
              // world larger than one must agree with MPI's.
              using namespace mt::dist;
              const RendezvousInfo& info = opts.rendezvous;
              auto pg = std::make_shared<ProcessGroupMPI>(ProcessGroupMPIOptions{.timeout = opts.timeout});
              MT_CHECK(info.world_size == 1 || (pg->rank() == info.rank && pg->size() == info.world_size),
                       "init_process_group: MPI says this process is rank ", pg->rank(), " of ", pg->size(),
                       ", the rendezvous says rank ", info.rank, " of ", info.world_size,
                       "; start the job with mpirun/srun alone, or pass no rendezvous");
              return std::static_pointer_cast<ProcessGroup>(pg);
            }});
