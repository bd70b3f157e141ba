// ProcessGroup: the ranks of a job and the collectives they run together. Every collective returns at
// once with a Work (work.h); wait() on it before touching its tensors.
//
//   allreduce(t, op)         every rank ends with op(t of rank 0, ..., t of rank n-1), in place
//   broadcast(t, root)       every rank ends with root's t
//   allgather(outs, t)       outs[r] = t of rank r, on every rank
//   reduce_scatter(out, in)  out = shard `rank` of op(in of rank 0, ..., in of rank n-1): in is n
//                            equal shards, each rank ends with the reduction of its own (ZeRO, zero.h)
//   allgather_into(out, in)  out = in of rank 0, in of rank 1, ...: n equal shards, flat
//   barrier()                completes once every rank has called it
//
// Backends: ProcessGroupLocal (process_group_local.h; a world of one, so that single-process code
// takes the same path), ProcessGroupGloo (process_group_gloo.h; CPU tensors over TCP),
// ProcessGroupMPI (process_group_mpi.h; CPU tensors through MPI, shared memory on one machine;
// started by mpirun or srun) and ProcessGroupNCCL (process_group_nccl.h; CUDA tensors on this rank's GPU).
// init_process_group (init.h) picks one from a RendezvousInfo.
//
// Tensors: contiguous tensors of float32, float64 or int64 on the group's device() (CPU for Local, Gloo
// and MPI, this rank's GPU for NCCL). Collectives write raw memory, outside autograd, so they bump the
// tensor's version counter when issued: autograd then refuses a backward that saved the tensor's old
// value.
//
// Every rank must issue the same collectives, with the same sizes, in the same order
// (Note [Collective order] in work.h). Issue them from one thread: the order must be one order.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group/work.h"
#include "tensor/tensor.h"

namespace mt::dist {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Every collective's timeout, and what Work::wait() waits by default.
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string backend() const = 0;  // "local", "gloo", "mpi", "nccl"
  // Where the tensors of this group's collectives live: kCPU, or cuda(i) for NCCL. Code that makes
  // tensors for a collective (DDP's fingerprint, an epoch's loss) makes them here.
  Device device() const { return device_; }

  // The collectives. They are not virtual: each checks its arguments, numbers the collective and
  // bumps the version of the tensors it will write, once for every backend, then hands over to the
  // backend's run_* below (Note [One opening for every collective]).
  //
  // Avg is Sum followed by a division by size() on each rank; it needs a floating dtype.
  // allreduce carries a guard that proves every rank was at the same all-reduce, or fails on every
  // rank naming where each was (Note [Collective guard] in collective_guard.cpp): up to 64 KiB in a
  // copy of the tensor, above that in a small all-reduce of its own issued just before it (Note
  // [Guarding large all-reduces]). allreduce_own_guard skips it, for buffers that end in a guard of
  // their own: DDP's buckets (Note [Desync guard]).
  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> allreduce_own_guard(Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0);
  // `outputs` is either empty (it is filled with size() new tensors shaped like `input`) or holds
  // size() contiguous tensors on device() of input's dtype and element count.
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input);
  std::shared_ptr<Work> barrier();
  // Flat collectives (Note [Flat shards]). reduce_scatter: `input` holds size() shards of
  // output.numel() elements; output = op over ranks of shard rank(), Sum or Avg. allgather_into:
  // `output` holds size() shards of input.numel() elements; shard r = rank r's input. Either may run
  // in place, with the small tensor being this rank's shard of the large one
  // (narrow(large, 0, rank() * n, n)); then the other shards of a reduce_scatter's input are left
  // unspecified.
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> allgather_into(Tensor& output, const Tensor& input);

  // Note [Progress]: lets collectives in flight advance; never blocks. A backend whose collectives
  // run on a thread of their own (Gloo's CollectiveQueue, NCCL's stream) needs nothing and keeps
  // this no-op. MPI advances a non-blocking collective only inside MPI calls, so ProcessGroupMPI
  // tests its requests here, and DDP calls it from every ready hook. For a large bucket the hooks
  // are the lesser part: ProcessGroupMPI's progress thread, woken by collectives of 64 KiB or more,
  // tests every 20 µs. A smaller collective does not wake it and, unless a larger one keeps the
  // thread polling (or with the thread off), moves only when the caller enters the group, as here
  // (Note [Progress thread] in process_group_mpi.cpp).
  virtual void progress() {}

 protected:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout, Device device = kCPU);

  // What a backend implements: the collective itself, its arguments already checked and the
  // written tensors' versions bumped. `what` names it in its Work and its errors: "allreduce #7
  // (203530 float32, Sum) on rank 1 of 4". allgather's `outputs` holds size() tensors.
  virtual std::shared_ptr<Work> run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) = 0;
  virtual std::shared_ptr<Work> run_broadcast(Tensor& tensor, int root, const std::string& what) = 0;
  virtual std::shared_ptr<Work> run_allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                              const std::string& what) = 0;
  virtual std::shared_ptr<Work> run_barrier(const std::string& what) = 0;
  virtual std::shared_ptr<Work> run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                                   const std::string& what) = 0;
  virtual std::shared_ptr<Work> run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) = 0;
  // The all-reduce of a large tensor after its guard (Note [Guarding large all-reduces] in
  // collective_guard.cpp): a backend that runs its collectives in issue order on a thread of its own
  // asks `proceed` there, when the all-reduce's turn comes, and skips it when the answer is no; by
  // default (a backend that hands each collective to its library at once) it runs regardless.
  virtual std::shared_ptr<Work> run_allreduce_if(Tensor& tensor, ReduceOp op, const std::string& what,
                                                 std::function<bool()> proceed) {
    return run_allreduce(tensor, op, what);
  }

 private:
  // Checks a collective's tensor (defined, on device(), contiguous, supported dtype); `what` names the call.
  void check_tensor(const Tensor& t, const std::string& what) const;
  // Checks the op against the dtype (Avg needs floating point).
  void check_reduce(const Tensor& t, ReduceOp op, const std::string& what) const;
  void check_root(int root, const std::string& what) const;
  // Checks `outputs` (see allgather) or fills an empty one.
  void prepare_allgather(std::vector<Tensor>& outputs, const Tensor& input, const std::string& what) const;
  // Checks a flat collective's pair: `shard` (n elements) and `whole` (size()·n, same dtype).
  void check_flat(const Tensor& shard, const Tensor& whole, const std::string& what) const;
  // Numbers collectives 1, 2, 3... in issue order: the same number on every rank for the same
  // collective (Note [Collective order]), and names it: "allreduce #7 (203530 float32, Sum) on rank 1 of 4".
  std::string number(const std::string& what, const std::string& detail);
  std::shared_ptr<Work> start_allreduce(Tensor& tensor, ReduceOp op, bool guard);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  Device device_;
  uint64_t issued_ = 0;  // collectives issued so far; numbers them in messages
};

// Note [Flat shards]: reduce_scatter and allgather_into split a flat buffer into size() equal,
// consecutive shards, shard r = [r·n, (r+1)·n). Run one after the other they move the bytes of one
// all-reduce (each rank sends and receives (size()-1)/size() of the buffer in each), which is how
// ring all-reduces work inside; ZeRO (zero.h) does its optimizer step between the two. Each shard is
// reduced once, on its one rank, so there is no question of ranks disagreeing on its bits; the order
// of the sum is fixed per backend and repeats from run to run (Gloo: rank order, x_0 + x_1 + ...,
// for buffers up to 128 KiB, then halving-doubling; MPI and NCCL: their own reduce-scatter,
// deterministic for a fixed world size).
// Uneven buffers are the caller's to split: ZeRO's hook pads nothing and all-reduces the remainder.

// Whether `shard` is rank's shard of `whole`, in place (check_flat has checked that any overlap is that).
bool is_own_shard(const Tensor& shard, const Tensor& whole, int rank);

// "11 float32": a tensor's element count and dtype, for collective descriptions.
std::string describe_tensor(const Tensor& t);

}  // namespace mt::dist
