// ProcessGroupNCCL: collectives on CUDA tensors through NCCL, one GPU per rank, the way PyTorch's
// GPU backend does it.
//
//   auto store = std::make_shared<TCPStore>(TCPStoreOptions{.host = "10.0.0.1", .port = 29500,
//                                                           .is_server = rank == 0});
//   ProcessGroupNCCL pg(store, rank, world_size, {.device = local_rank});
//   Tensor t = ones({1024}, {.device = mt::cuda_device(local_rank)});
//   pg.allreduce(t)->wait();
//
// Setup: rank 0 makes the ncclUniqueId (the address of NCCL's own bootstrap) and puts it in the
// store; every rank reads it and joins with ncclCommInitRankConfig on a non-blocking communicator,
// so that a rank that never arrives ends in a TimeoutError instead of a hang (Note [Non-blocking
// communicator] in nccl_check.h).
//
// A collective queues work on the GPU and returns at once; nothing here blocks the host except
// Work::wait():
//   Note [Comm stream]         collectives run on the group's own stream, ordered after the compute
//                              stream with an event: the host never waits for the GPU to issue them.
//   Note [NCCL Work::wait]     wait() blocks the host until the collective finished, and throws if it
//                              failed, like every other backend's Work.
//   Note [Tensors stay alive]  the Work keeps its tensors until the GPU is done with them.
//   Note [NCCL watchdog]       a thread per group turns a dead peer or a hung collective into an
//                              error (and an aborted communicator) instead of a job that hangs.
// These Notes live in process_group_nccl.cpp; docs/gpu.md tells the whole story.
//
// Tensors: contiguous CUDA tensors on this rank's device (float32, float64, int64). ReduceOp::Avg is
// NCCL's own ncclAvg (the division happens inside the reduction).
//
// Not here: several GPUs per rank, reduce/scatter/all-to-all, point-to-point, splitting the group,
// NCCL's user buffer registration. Built only where CMake found NCCL and the CUDA backend
// (MT_HAVE_NCCL); elsewhere is_available() is false and the constructor says so.
#pragma once

#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"
#include "distributed/store/store.h"

namespace mt::dist {

namespace detail {
struct NcclComm;  // communicator, comm stream, works in flight, watchdog (process_group_nccl.cpp)
}

struct ProcessGroupNCCLOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;  // setup, and every collective (the watchdog's limit)
  int device = 0;  // this rank's GPU (init_process_group passes LOCAL_RANK's)
  // How often the watchdog looks at the collectives in flight (Note [NCCL watchdog]).
  std::chrono::milliseconds watchdog_interval{100};
};

class ProcessGroupNCCL : public ProcessGroup {
 public:
  // Meets the other ranks through `store` and creates the NCCL communicator on opts.device. Blocks
  // until all `size` ranks have joined; throws a TimeoutError naming the ranks that did not, or an
  // mt::Error when this rank's world size differs from rank 0's. Use a fresh store (or PrefixStore)
  // per group.
  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupNCCLOptions opts = {});
  // Waits (at most the timeout) for the collectives in flight, then stops the watchdog and destroys
  // the communicator (aborts it if the group failed).
  ~ProcessGroupNCCL() override;

  // Whether this build has NCCL (and the CUDA backend).
  static bool is_available();
  std::string backend() const override { return "nccl"; }
  int cuda_device() const { return device().index; }

 private:
  // The collectives (Note [One opening for every collective]: ProcessGroup checked and numbered them).
  std::shared_ptr<Work> run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) override;
  std::shared_ptr<Work> run_broadcast(Tensor& tensor, int root, const std::string& what) override;
  std::shared_ptr<Work> run_allgather(std::vector<Tensor>& outputs, const Tensor& input, const std::string& what) override;
  // barrier: a one-element all-reduce, waited for by the Work's wait() like any other.
  std::shared_ptr<Work> run_barrier(const std::string& what) override;
  std::shared_ptr<Work> run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                           const std::string& what) override;
  std::shared_ptr<Work> run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) override;

  std::shared_ptr<Store> store_;  // kept: rank 0's may host the TCPStore server for the whole job
  // Defined in the .cpp, so that NCCL's and CUDA's headers stay out of this one.
  std::unique_ptr<detail::NcclComm> nccl_;
};

}  // namespace mt::dist
