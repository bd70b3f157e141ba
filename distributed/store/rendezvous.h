// Rendezvous: how a process learns who it is in a job (its rank, the world size, its place on its
// machine) and where to meet the others (the store's address). Read from the environment, the way
// launchers hand it over:
//
//   env:// (torchrun, mini_train's launcher)   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//                                               LOCAL_RANK, LOCAL_WORLD_SIZE (and MT_STORE_PREFIX)
//   mpirun/mpiexec, when RANK is not set        see rendezvous_from_mpi_launcher below; MASTER_PORT is
//                                               optional (master_port 0 = no store: fine for the mpi
//                                               backend, an error naming it for gloo)
//   Slurm (srun), when RANK is not set          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                                               SLURM_TASKS_PER_NODE + SLURM_NODEID (tasks on this node),
//                                               MASTER_ADDR or else the first host of SLURM_STEP_NODELIST
//                                               (or SLURM_JOB_NODELIST), MASTER_PORT
//
// Note [Rendezvous defaults]: nothing is guessed that could silently join the wrong job.
//   - MASTER_PORT is always required: there is no default port.
//   - MASTER_ADDR defaults to 127.0.0.1 only when the job is known to fit on one machine
//     (LOCAL_WORLD_SIZE == WORLD_SIZE, or neither LOCAL_* variable is set); a multi-node job must say
//     where its store is. Under Slurm the first node of the step hosts it.
//   - LOCAL_RANK and LOCAL_WORLD_SIZE go together: neither set means one machine
//     (local_rank = rank, local_world_size = world_size); one without the other is an error.
// Every missing or malformed variable is an error that names it and says what was expected.
//
// Not here: file:// or tcp:// URLs, elastic membership (ranks joining or leaving a running job).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace mt::dist {

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;         // rank among the processes on this machine (picks the GPU)
  int local_world_size = 1;   // processes on this machine
  std::string master_addr = "127.0.0.1";  // where the TCPStore is hosted (Note [Rendezvous defaults])
  int master_port = 0;  // its port; 0: none (a world of one, or ranks that meet through a given store)
  // Non-empty: a launcher hosts the store at master_addr:master_port (rank 0 connects like everyone
  // else) and this job's keys live under this prefix. env:// reads it from MT_STORE_PREFIX, which
  // mini_train's multi-node launcher sets per attempt (Note [Launcher-hosted store] in init_process_group.cpp).
  std::string store_prefix{};
};

// Looks up one environment variable; tests pass a map instead of the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> process_env(const std::string& name);

// The rendezvous described by the environment: env:// when RANK or WORLD_SIZE is set, else an MPI
// launcher's variables (mpirun, mpiexec), else Slurm's when SLURM_PROCID is set. std::nullopt when
// none is present (a plain single-process run). Throws mt::Error naming the variable when what is present is incomplete or invalid.
std::optional<RendezvousInfo> rendezvous_from_env(const EnvLookup& env = process_env);

// The rendezvous an MPI launcher handed over, for ProcessGroupMPI (which needs no store, so no
// MASTER_PORT is required here; master_port stays 0 unless MASTER_PORT is set):
//   OpenMPI's mpirun/mpiexec    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                               OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   MPICH/Hydra, Intel MPI      PMI_RANK, PMI_SIZE (MPI_LOCALRANKID, MPI_LOCALNRANKS when set)
//   Slurm's srun (--mpi=pmix)   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE
// std::nullopt when none is set (not started by an MPI launcher). It only reads the environment; MPI
// itself, once initialised, is the authority (ProcessGroupMPI::world()).
std::optional<RendezvousInfo> rendezvous_from_mpi_launcher(const EnvLookup& env = process_env);

// Checks the fields' ranges (rank < world size, port in range, ...); `source` names where they came
// from in the message. rendezvous_from_env calls it; init_process_group calls it on what it is given.
void validate(const RendezvousInfo& info, const std::string& source = "RendezvousInfo");

// The first host of a Slurm hostlist: "node[07-09,12],gpu3" -> "node07". Exposed for tests.
std::string first_slurm_host(const std::string& hostlist);
// This node's task count from SLURM_TASKS_PER_NODE ("2(x3),1") and SLURM_NODEID. Exposed for tests.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id);

}  // namespace mt::dist
