// Choosing the CPU process group (see backend.h).
#include "apps/mini_train/backend.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "distributed/process_group/mpi/process_group_mpi.h"
#include "distributed/store/rendezvous.h"
#include "tensor/check.h"

namespace mt::app {

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/mpirun";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

void validate_backend(const Options& o) {
  if (o.backend != "mpi") return;
  MT_CHECK(dist::ProcessGroupMPI::is_available(), "--backend mpi: this build has no MPI (CMake did not find it; "
           "Debian: apt install libopenmpi-dev openmpi-bin, then rebuild), use --backend gloo");
  MT_CHECK(o.gpus.empty(), "--backend mpi is for CPU jobs; --gpus uses NCCL between GPUs");
  MT_CHECK(o.nnodes == 1, "--backend mpi with --nnodes: start MPI jobs on several machines with mpirun --host "
           "(or a hostfile) or srun, running mini_train without --nproc (docs/mpi.md)");
}

std::string launch_backend(const Options& o) {
  if (o.backend != "auto") return o.backend;
  const bool mpi = dist::ProcessGroupMPI::is_available() && o.nnodes == 1 && !find_mpirun().empty();
  return mpi ? "mpi" : "gloo";
}

std::string worker_backend(const Options& o) {
  // RANK is what mini_train's own launcher and torchrun set: their ranks meet through a TCPStore, so
  // Gloo, even inside an allocation whose SLURM_* variables would also name a rank.
  const bool under_mpi = !std::getenv("RANK") && dist::rendezvous_from_mpi_launcher().has_value();
  if (o.backend == "mpi")
    MT_CHECK(under_mpi, "--backend mpi: this process was not started by mpirun, mpiexec or srun; run "
             "mini_train --nproc N --backend mpi, or mpirun -np N mini_train");
  if (o.backend == "gloo" || !under_mpi) return "gloo";
  return dist::ProcessGroupMPI::is_available() ? "mpi" : "gloo";
}

}  // namespace mt::app
