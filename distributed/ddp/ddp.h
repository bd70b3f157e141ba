// DistributedDataParallel: data-parallel training over a ProcessGroup. Every rank holds the whole
// model and runs it on its own slice of the batch; during backward the gradients are averaged over
// the ranks, so after backward every rank holds the gradient of the mean loss over the whole batch
// and the same optimizer step keeps the replicas identical. It follows PyTorch's Reducer (Li et al.,
// VLDB 2020), in the order things happen (ddp.cpp, then the Reducer: reducer.cpp, reducer_finalize.cpp):
//
//   construct  check that all ranks have the same parameters, broadcast rank 0's values,
//              pack the gradients into buckets (Note [Buckets])
//   forward    in training mode, broadcast rank 0's buffers first (Note [Buffer broadcast]), and
//              before the second step lay the buckets out again in the order the first step's
//              gradients arrived (Note [Bucket rebuild]); after the module's forward, with
//              find_unused_parameters, find the parameters its output cannot reach (Note [Unused
//              parameters found after forward])
//   hook       each parameter's post-accumulate-grad hook marks it ready (Note [Ready hooks])
//   launch     a bucket whose parameters are all ready is all-reduced asynchronously, strictly in
//              bucket order (Note [Bucket launch order]), pre-divided by the world size (Note [Averaging]),
//              by the comm hook (comm_hook.h: plain all-reduce, or fp16-compressed)
//   finalize   an engine callback after the last node waits for every all-reduce, checks that every
//              parameter was reduced (Note [Finalize]) and that every rank was at the same step and
//              bucket (Note [Desync guard], desync_guard.h: a few guard elements ride in each bucket)
//   stats      what each bucket cost and whether backward hid it (ddp_stats.h, Note [Overlap])
//
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model, pg, {.bucket_cap_mb = 25});
//   optim::SGD opt(ddp->parameters(), {.lr = 0.1});
//   loss_fn(ddp->forward(x_of_this_rank), y_of_this_rank).backward();  // gradients averaged here
//   opt.step();
//   opt.zero_grad();   // the next backward writes into the buckets again (Note [Gradients are bucket views])
//
// Uneven inputs (ranks with different numbers of batches): Join, ddp_join.h.
//
// What it does not do: PowerSGD, static-graph optimisations, several backwards
// per forward, forwards of several inputs, CUDA streams.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp_stats.h"
#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace mt::dist {

struct DDPOptions {
  double bucket_cap_mb = 25;         // a bucket holds at most this many MiB of gradients...
  double first_bucket_cap_mb = 1;    // ...except the first (the last layer's): small, so it launches early
  double last_bucket_cap_mb = 1;     // ...and the last (the first layers', the embeddings'): small, so that
                                     // little waits for the last gradient (Note [Last bucket] in reducer.cpp);
                                     // 0: no cap of its own
  bool find_unused_parameters = false;  // a parameter without gradient is reduced with what its .grad
                                        // holds (Note [Unused parameters]) instead of an error; the
                                        // ones forward's output cannot reach are ready when backward
                                        // begins (Note [Unused parameters found after forward])
  bool rebuild_buckets = true;       // after the first backward, lay the buckets out once more in the
                                     // order its gradients arrived on rank 0 (Note [Bucket rebuild])
  bool broadcast_buffers = true;     // rank 0's buffers to every rank at construction and before each
                                     // forward in training mode (Note [Buffer broadcast], buffer_sync.cpp)
};

namespace detail {
class Reducer;  // detail/reducer.h; shared with the hooks, which may outlive the DDP object
}

class DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> process_group,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  // The wrapped module's forward. In training mode with broadcast_buffers, rank 0's buffers are
  // first copied to every rank (Note [Buffer broadcast]); in training mode with grad enabled, the
  // first forward after the first backward may rebuild the buckets (Note [Bucket rebuild]), a
  // collective. With find_unused_parameters it then walks the graph from the output (Note [Unused
  // parameters found after forward]).
  Tensor forward(const Tensor& input) override;

  // Fills every bucket with zeros; the .grad tensors stay views into the buckets. The same as far as
  // the next backward is concerned as opt.zero_grad() or model->zero_grad(), whose set_to_none just
  // forgets .grad (Note [Gradients are bucket views]).
  void zero_grad();

  // Replaces how buckets are communicated (comm_hook.h), e.g. Fp16CompressHook. Before the first
  // backward; every rank must register the same hook.
  void register_comm_hook(std::shared_ptr<CommHook> hook);

  // RAII: while a NoSync is alive, backward does not communicate; gradients accumulate locally in the
  // buckets. The first backward after it averages the accumulated sums. Gradient accumulation over
  // k micro-batches:
  //   opt.zero_grad();                                                  // once per optimizer step
  //   { auto guard = ddp.no_sync(); (loss(micro_batch_0) / k).backward(); ... }
  //   (loss(micro_batch_last) / k).backward();   // reduces the sum of all k micro-batches
  //   opt.step();
  // - Scale each micro-batch's loss by 1/k: DDP averages over ranks only, and the micro-batches'
  //   gradients add up in the bucket, so unscaled they give k times the mean over the combined
  //   batch (test_ddp.cpp's no_sync test scales by 1/2).
  // - No zero_grad between micro-batches: opt.zero_grad() makes the next backward write its first
  //   gradient over the bucket slot (Note [Gradient destination]), and zero_grad() above zeroes the
  //   buckets; either forgets the micro-batches so far.
  // - A no_sync backward is invisible to DDPStats (--ddp-stats): its hooks return before queueing
  //   finalize, so it is not counted in `backwards` and not timed; the synced backward that follows
  //   is timed from its own first hook.
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<detail::Reducer> reducer);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<detail::Reducer> reducer_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync();

  // The replica guard (replica_guard.h) on the wrapped module's parameters: a collective, so every
  // rank calls it at the same point; throws naming the first parameter whose copies differ.
  void check_replicas(const std::string& when);

  // Note [Join] (ddp_join.h): one backward's collectives with zero gradients, for a rank out of data.
  // Join calls it; after it, .grad holds the other ranks' average.
  void shadow_backward();

  // The buckets as the reducer laid them out (Note [Buckets] in reducer.cpp), read-only: what a comm
  // hook's user such as ZeRO (distributed/zero/zero.h) builds on, instead of working it out again.
  struct BucketLayout {
    Tensor buffer;                     // flat: `numel` gradient elements, then the desync guard's;
                                       // undefined under a hook that releases buckets (comm_hook.h)
    int64_t numel = 0;
    std::vector<std::string> names;    // its parameters, in bucket order
    std::vector<Tensor> parameters;
    std::vector<int64_t> offsets;      // where each parameter's gradient starts in `buffer`
  };
  std::vector<BucketLayout> bucket_layout() const;

  const DDPStats& stats() const;
  // Per bucket, which rank's gradient arrived last (Note [Straggler attribution] in bucket_timeline.cpp). A
  // collective: every rank calls it at the same point, e.g. after training; off the hot path.
  std::vector<BucketArrival> bucket_arrivals();
  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return process_group_; }

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> process_group_;
  std::shared_ptr<detail::Reducer> reducer_;
  bool broadcast_buffers_;

  void sync_buffers();  // Note [Buffer broadcast]
};

}  // namespace mt::dist
