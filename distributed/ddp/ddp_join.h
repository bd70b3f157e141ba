// Join: uneven inputs. DDP needs every rank to run the same steps: a rank that runs out of batches
// first would leave the others waiting in their next bucket all-reduce (or, with the desync guard,
// fail them). With a Join, that rank keeps answering the others' steps until every rank is done:
//
//   dist::Join join(ddp, {.step = [&] { opt.step(); }});
//   for (const auto& batch : my_batches) {     // some ranks have more than others
//     join.step();                             // "I still have data": one 1-element all-reduce
//     ddp.zero_grad();
//     loss_fn(ddp.forward(batch.x), batch.y).backward();
//     opt.step();
//   }
//   join.join();                               // out of data: shadow the others' steps, then return
//
// Note [Join]: each step begins with an all-reduce of one count, 1 from each rank with data, 0 from
// each that has joined. A joined rank loops: it all-reduces 0, and when the count is positive it
// shadows one backward (DistributedDataParallel::shadow_backward: every bucket all-reduced with
// zero gradients, in bucket order, with the desync guard of the same step) and runs JoinOptions::step
// with the gradient it got back, which is the same average the active ranks got. When the count is
// 0, every rank has joined; all see it in the same all-reduce and return together. The average
// still divides by the whole world size (a joined rank adds zeros), as PyTorch's Join does by
// default: the step of a batch-of-fewer-ranks is smaller. Because every rank applied the same
// updates (the active ones in their loop, the joined ones in JoinOptions::step), the replicas stay
// bit-for-bit the same, which check_replicas can confirm.
//
// With ZeRO-1 (distributed/zero/zero.h) the same holds: the shadow backward goes through the registered
// comm hook, so a joined rank reduce-scatters its zeros like any bucket (ZeroHook), and
// JoinOptions::step is the ZeroRedundancyOptimizer's step: it updates this rank's shard with the
// average it got back, and its all-gather is the one the active ranks' steps wait for
// (tests/distributed/test_join_zero.cpp). So under ZeRO a Join without a step is refused when it is
// made. A collective the loop adds between backward and step (ZeRO's clip_grad_norm) belongs in
// JoinOptions::step too, or the ranks' collectives no longer pair up.
//
// Only DDP's collectives are shadowed. A SyncBatchNorm's (sync_batchnorm.h) run inside the model's
// forward and backward, which a joined rank has no batch for, so the active ranks' statistics
// all-reduce would be paired with the joined rank's first bucket and every later collective would
// be off by one (Note [Collective order]). Join therefore refuses, when it is made, a model with a
// synchronised BatchNorm in a world of more than one rank, as PyTorch's Join cannot serve one
// either; equal batches per rank (drop_last) are the way there.
//
// Join is not DDP's alone: it drives a Joinable (below), which DistributedDataParallel is through a
// small adapter (ddp_join.cpp) and FullyShardedDataParallel is itself (Note [FSDP Join] in
// distributed/zero/fsdp_join.cpp). Join owns the count and the loop; the Joinable says what one step of
// the active ranks issues and how to answer it with zeros.
//
// Not here: collectives of the user's own between steps, several models in one Join, dividing
// by the number of active ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "distributed/ddp/ddp.h"

namespace mt::dist {

struct JoinOptions {
  // Runs on a joined rank after each step it shadowed, with the averaged gradient in .grad: the same
  // optimizer (and scheduler) step the active ranks take in their loop. Empty: nothing, and the
  // joined ranks' parameters fall behind (call check_replicas to see it); refused under ZeRO (every
  // stage: the active ranks' next all-gathers read the joined rank's shard).
  std::function<void()> step{};
};

// What Join drives (Note [Join]): a data-parallel wrapper whose per-step collectives a rank
// without data can issue with zero gradients.
class Joinable {
 public:
  virtual ~Joinable() = default;
  virtual ProcessGroup& join_process_group() = 0;
  // Join's constructor: throws one line for what this wrapper cannot shadow.
  virtual void check_joinable(const JoinOptions& opts) const = 0;
  // Join::step, on a rank with data, after the count: a step begins.
  virtual void join_step_begins() {}
  // On a joined rank, once per step of the others: their backward's collectives (and any of the
  // forward's), with zero gradients; JoinOptions::step runs after it.
  virtual void shadow_step() = 0;
  // The Join is over on this rank (every rank has joined).
  virtual void join_ended() {}
};

class Join {
 public:
  explicit Join(DistributedDataParallel& ddp, JoinOptions opts = {});
  explicit Join(Joinable& joinable, JoinOptions opts = {});
  // Joins if join() was not called, unless an exception is unwinding (the job is failing anyway).
  ~Join() noexcept(false);
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // At the start of each step with data, on this rank: returns how many ranks have data this step.
  int64_t step();
  // This rank is out of data: shadow the other ranks' steps until all have joined. Returns the
  // number of steps shadowed.
  int64_t join();

 private:
  int64_t count_active(int64_t mine);
  JoinOptions opts_;
  std::unique_ptr<Joinable> adapter_;  // DDP's (ddp_join.cpp); empty when made over a Joinable
  Joinable& joinable_;
  bool joined_ = false;
};

}  // namespace mt::dist
