// ProcessGroupMPI: collectives on CPU tensors through MPI (OpenMPI, MPICH, ...), the library HPC
// clusters already run. Between processes on one machine MPI moves data through shared memory: an
// 11-float all-reduce takes about a microsecond where Gloo's loopback TCP takes hundreds.
//
//   // started as: mpirun -np 4 ./train      (or srun -n 4 ./train under Slurm)
//   ProcessGroupMPI pg({.timeout = std::chrono::seconds(30)});   // rank and size come from MPI
//   pg.allreduce(t)->wait();
//
// The launcher (mpirun, srun) has already told every process who it is, so there is no store and no
// address to meet at; init_process_group({.backend = "mpi"}) makes one too.
//
// How it works (docs/mpi.md has the measurements behind each choice):
//   - Every collective is MPI's non-blocking version (MPI_Iallreduce, MPI_Ibcast, ...), issued on the
//     calling thread: allreduce() returns at once with a Work that holds the MPI request, and no
//     thread hand-off sits between the caller and MPI. MPI moves a request only inside MPI calls, so
//     a progress thread (on by default), woken by collectives of 64 KiB or more, tests the requests
//     in flight every 20 µs and completes those it finds done; smaller ones do not wake it and move
//     when the caller next enters the group (Note [Progress thread] in process_group_mpi.cpp).
//   - Work::wait() polls the request with MPI_Test against a deadline, so a collective whose peer
//     never comes ends in a TimeoutError naming it, and the group's later collectives fail at once
//     (Note [Timeouts without cancellation] in process_group_mpi.cpp).
//   - MPI is initialised once per process, by the first group, and finalized at exit
//     (Note [MPI is initialised once per process]). Groups can be created and destroyed any number of
//     times; each works on its own duplicate of MPI_COMM_WORLD, so groups never see each other's
//     messages.
//
// Tensors: contiguous CPU tensors of float32, float64, int64 (MPI's own types and reductions), or
// float16 and bfloat16 (sent as 16-bit words, reduced by user-defined MPI_Ops through float32).
//
// Threads: every MPI call made here holds one process-wide lock, so MPI is asked for
// MPI_THREAD_SERIALIZED (not MULTIPLE, whose internal locking slows every call in OpenMPI). Issue a
// group's collectives from one thread (Note [Collective order]); wait() may be called from any.
//
// Not here: GPU-aware MPI (CUDA tensors), sub-communicators, ReduceOp beyond Sum/Avg/Max,
// reduce/scatter/all-to-all (reduce_scatter and allgather_into are MPI_Ireduce_scatter_block
// and MPI_Iallgather). Built only where CMake found MPI (MT_MPI, cmake/Dependencies.cmake);
// elsewhere is_available() is false and the constructor says how to get it.
#pragma once

#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"

namespace mt::dist {

struct ProcessGroupMPIOptions {
  // Every collective's timeout (counted from when it was issued), and the time allowed for all ranks
  // to create the group.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // A thread that, once a collective of 64 KiB or more wakes it, tests the requests in flight every
  // 20 µs, so that a large collective advances (and completes) while the caller computes (Note
  // [Progress thread] in process_group_mpi.cpp). Off: requests advance only when the caller enters
  // the group (an issue, progress(), is_completed(), wait()).
  bool progress_thread = true;
};

class ProcessGroupMPI : public ProcessGroup {
 public:
  // Initialises MPI if nobody has (MPI_Init_thread), then forms a group of every process of the job
  // (MPI_COMM_WORLD): a collective call, like every group constructor; throws a TimeoutError when the
  // other ranks do not create theirs within the timeout.
  explicit ProcessGroupMPI(ProcessGroupMPIOptions opts = {});
  ~ProcessGroupMPI() override;

  // Whether this build has MPI.
  static bool is_available();
  // This process's rank and the job's size in MPI_COMM_WORLD (initialises MPI if needed).
  struct World {
    int rank = 0;
    int size = 1;
  };
  static World world();
  // The thread level MPI granted ("MPI_THREAD_SERIALIZED"), or "" before MPI is initialised.
  static std::string thread_level();
  // Note [A failing rank aborts the job]: a rank that gives up must not exit normally: at exit MPI is
  // finalized, and MPI_Finalize waits for every other rank, which are themselves waiting in a
  // collective for this one: the job would hang until the collective timeout. abort_job calls
  // MPI_Abort, which makes the launcher (mpirun, srun) kill every rank at once and report this one's
  // code. It returns (doing nothing) when MPI was never initialised in this process, so callers can
  // call it on every error path and then exit as usual.
  static void abort_job(int exit_code);
  // Finalizes MPI now, when this library initialised it and nothing is left in flight (Note [MPI is
  // initialised once per process]); else, and in a build without MPI, does nothing. Without this
  // call it happens at exit; a program whose heartbeat should cover MPI_Finalize, which waits for
  // every rank, calls it before the heartbeat ends (Note [Watched from start to exit] in
  // distributed/fault/heartbeat.h). No group may be used after it.
  static void finalize();

  std::string backend() const override { return "mpi"; }

  // Tests every request in flight once (Note [Progress] in process_group.h).
  void progress() override;

  struct State;  // the communicator and the requests in flight; process_group_mpi.cpp

 private:
  ProcessGroupMPI(World world, ProcessGroupMPIOptions opts);

  // The collectives (Note [One opening for every collective]: ProcessGroup checked and numbered them).
  std::shared_ptr<Work> run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) override;
  std::shared_ptr<Work> run_broadcast(Tensor& tensor, int root, const std::string& what) override;
  std::shared_ptr<Work> run_allgather(std::vector<Tensor>& outputs, const Tensor& input, const std::string& what) override;
  std::shared_ptr<Work> run_barrier(const std::string& what) override;
  std::shared_ptr<Work> run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                           const std::string& what) override;
  std::shared_ptr<Work> run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) override;

  std::shared_ptr<State> state_;  // shared with the Works, which may outlive the group
};

}  // namespace mt::dist
