// mini_train --backend: which process group the CPU ranks of a job use, decided in one place.
//
//   mpi    ProcessGroupMPI (distributed/process_group/mpi/process_group_mpi.h): shared memory between ranks on one
//          machine, about 25x lower latency than Gloo here (bench/README.md). The ranks must be
//          started by an MPI launcher: `mini_train --nproc N` runs `mpirun -np N mini_train ...`
//          itself; `mpirun`/`srun` started by the user work too.
//   gloo   ProcessGroupGloo over TCP: no MPI needed; mini_train's own launcher starts the ranks.
//   auto   mpi when this build has MPI and an `mpirun` is on the PATH (the benchmark shows it faster
//          at every size we measured), else gloo. The config table says which it chose.
// GPUs (--gpus) always use NCCL; --backend is about CPU jobs.
#pragma once

#include <string>

#include "apps/mini_train/options.h"

namespace mt::app {

// The backend the launcher starts ranks for: "mpi" or "gloo" (resolves auto).
std::string launch_backend(const Options& opts);

// The process group a worker joins, from how it was started: "mpi" when an MPI launcher started
// it (and --backend is not gloo), else "gloo". Throws when --backend mpi meets a process that no MPI
// launcher started.
std::string worker_backend(const Options& opts);

// Refuses what cannot work: --backend mpi in a build without MPI, with --gpus, or with --nnodes
// (MPI jobs on several machines start with mpirun --host or srun, docs/mpi.md).
void validate_backend(const Options& opts);

// The mpirun found on the PATH ("" if none).
std::string find_mpirun();

}  // namespace mt::app
