// DDP, --sync-bn, --zero 1|2|3 and the clip over shards for mini_train (see data_parallel.h).
#include "apps/mini_train/data_parallel.h"

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "distributed/ddp/sync_batchnorm.h"
#include "distributed/zero/zero.h"
#include "tensor/memory.h"

namespace mt::app {

namespace {

// --zero 1|2: the optimizer, with whatever state --resume gave it, becomes this rank's shard of itself
// (distributed/zero/zero.h; stage 2 also keeps only this rank's shard of the reduced gradients), and
// the schedule is rebuilt over it where it was.
// Under --zero 3 the model is FullyShardedDataParallel's, and the optimizer steps its shards
// (distributed/zero/fsdp.h).
void shard_optimizer(Run& r) {
  const optim::StateDict schedule = r.scheduler ? r.scheduler->state_dict() : optim::StateDict{};
  r.scheduler.reset();  // it refers to the optimizer being replaced
  {
    MemoryKindGuard kind(MemoryKind::kOptimizerState);  // a resumed state's shard (Note [Memory kinds])
    if (r.fsdp) r.opt = std::make_unique<dist::FsdpOptimizer>(r.fsdp, std::move(r.opt));
    else r.opt = std::make_unique<dist::ZeroRedundancyOptimizer>(r.ddp, std::move(r.opt), dist::ZeroOptions{.stage = r.o.zero});
  }
  r.scheduler = build_scheduler(r.o, *r.opt, total_steps(r.o, r.steps_per_epoch));
  if (r.scheduler) r.scheduler->load_state_dict(schedule);
}

// A run of one process has no DDP. --zero 1|2 and --comm-hook change what DDP sends, so asking for them
// where nothing is sent is refused; the options that only tune or report DDP are ignored with a
// warning on rank 0's stderr, which --quiet does not hide (--ddp-stats still reports the peak memory).
void check_one_process(const Run& r) {
  const char* how = "this run is one process: add --nproc N (CPU) or --gpus";
  MT_CHECK(!r.o.zero, "--zero ", r.o.zero, " shards the optimizer state over the ranks of a distributed run, and ", how,
           " (or leave --zero 0)");
  MT_CHECK(r.o.comm_hook == "allreduce", "--comm-hook ", r.o.comm_hook, " compresses DDP's gradient all-reduce, and ",
           how, " (or drop --comm-hook)");
  std::string ignored;
  const Options defaults;
  for (const auto& [flag, set] : {std::pair{"--bucket-cap-mb", r.o.bucket_cap_mb != defaults.bucket_cap_mb},
                                  std::pair{"--sync-bn", r.o.sync_bn}, std::pair{"--check-replicas", r.o.check_replicas > 0}})
    if (set) ignored += (ignored.empty() ? "" : ", ") + std::string(flag);
  if (r.lead && !ignored.empty())
    std::fprintf(stderr, "mini_train: warning: ignored in a run of one process (they tune or report DDP between "
                 "processes): %s\n", ignored.c_str());
}

}  // namespace

void set_up_data_parallel(Run& r) {
  if (!r.pg) return check_one_process(r);
  // --sync-bn: the BatchNorms switch to statistics over every rank's batch (Note [Sync batch norm]).
  if (r.o.sync_bn) dist::convert_sync_batchnorm(*r.model, r.pg);
  if (r.o.zero == 3) {  // each transformer block (or top-level layer) a unit; the optimizer over their shards
    r.fsdp = std::make_shared<dist::FullyShardedDataParallel>(r.model, r.pg);
    return shard_optimizer(r);
  }
  r.ddp = std::make_shared<dist::DistributedDataParallel>(r.model, r.pg,
                                                          dist::DDPOptions{.bucket_cap_mb = r.o.bucket_cap_mb});
  r.ddp->register_comm_hook(dist::make_comm_hook(r.o.comm_hook));
  if (r.o.zero) shard_optimizer(r);
}

// The optimizer clips: over its shards, a collective, when it is ZeRO's (Optimizer::clip_grad_norm).
void clip_gradients(Run& r) {
  // fp16: clip the true gradients, not the scaled ones (unscale_ also finds inf/NaN, once per step).
  if (r.scaler) r.scaler->unscale_(*r.opt);
  r.opt->clip_grad_norm(r.o.clip_grad);
}

}  // namespace mt::app
