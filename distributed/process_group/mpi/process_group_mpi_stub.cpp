// ProcessGroupMPI in a build without MPI: the same class, whose constructors say how to get MPI.
// cmake/Components.cmake compiles this file instead of process_group_mpi.cpp when CMake did not
// find MPI (or was told -DMT_MPI=OFF), so the component minitrain::mpi exists in every build.
#include "distributed/process_group/mpi/process_group_mpi.h"

namespace mt::dist {

struct ProcessGroupMPI::State {};

namespace {
[[noreturn]] void no_mpi() {
  MT_FAIL("this build of minitrain has no MPI backend: CMake did not find MPI (Debian: apt install "
          "libopenmpi-dev openmpi-bin; conda: conda install -c conda-forge openmpi), or it was configured "
          "with -DMT_MPI=OFF; reconfigure and rebuild");
}
}  // namespace

bool ProcessGroupMPI::is_available() { return false; }
void ProcessGroupMPI::abort_job(int) {}
void ProcessGroupMPI::finalize() {}
ProcessGroupMPI::World ProcessGroupMPI::world() { no_mpi(); }
std::string ProcessGroupMPI::thread_level() { return ""; }
ProcessGroupMPI::ProcessGroupMPI(ProcessGroupMPIOptions opts) : ProcessGroup(0, 1, opts.timeout) { no_mpi(); }
ProcessGroupMPI::ProcessGroupMPI(World world, ProcessGroupMPIOptions opts) : ProcessGroup(0, 1, opts.timeout) {
  no_mpi();
}
ProcessGroupMPI::~ProcessGroupMPI() = default;
std::shared_ptr<Work> ProcessGroupMPI::run_allreduce(Tensor&, ReduceOp, const std::string&) { no_mpi(); }
std::shared_ptr<Work> ProcessGroupMPI::run_broadcast(Tensor&, int, const std::string&) { no_mpi(); }
std::shared_ptr<Work> ProcessGroupMPI::run_allgather(std::vector<Tensor>&, const Tensor&, const std::string&) {
  no_mpi();
}
std::shared_ptr<Work> ProcessGroupMPI::run_barrier(const std::string&) { no_mpi(); }
void ProcessGroupMPI::progress() {}
std::shared_ptr<Work> ProcessGroupMPI::run_reduce_scatter(Tensor&, const Tensor&, ReduceOp, const std::string&) {
  no_mpi();
}
std::shared_ptr<Work> ProcessGroupMPI::run_allgather_into(Tensor&, const Tensor&, const std::string&) {
  no_mpi();
}

}  // namespace mt::dist
