// FullyShardedDataParallel as a dist::Joinable (see fsdp.h, Note [FSDP Join]): the log of a step's
// collectives, and the joined rank's replay of it with zero gradients.
#include "distributed/zero/fsdp.h"

#include "distributed/ddp/detail/buffer_sync.h"
#include "distributed/ddp/sync_batchnorm.h"
#include "distributed/zero/detail/fsdp_unit.h"
#include "tensor/raw_ops.h"

namespace mt::dist {

// Note [FSDP Join]: under DDP a step's collectives are the buckets of one backward, which the
// Reducer can issue without a batch (Note [Join]). Under ZeRO-3 the forward has collectives too
// (each unit's all-gather, the buffers' broadcast), and the backward's all-gathers and
// reduce-scatters interleave in an order the model's graph decides (Note [FSDP prefetch], Note
// [Reduce-scatter of a unit]). Rather than derive that order a second time, a rank inside a Join
// keeps a log of what it issued since its step began (Join::step): the buffers' broadcast, each
// unit's all-gather, each unit's reduce-scatter, in issue order. When it joins, each step it
// shadows replays its own last step's log: the same collectives in the same order, each waited for
// at once (they pair by issue order, Note [Collective order], so the waits cannot cross): an
// all-gather of its shard whose result nobody reads, the buffers' broadcast from rank 0, and a
// reduce-scatter of zeros whose output becomes the unit's shard gradient: the sum of the active
// ranks' gradients over the whole world size, as DDP's Join divides (Note [Join]). JoinOptions::step
// (FsdpOptimizer's clip_grad_norm, whose scalar all-reduce the active ranks issue too, and step)
// then updates this rank's shards with it, so the next all-gather of every rank reads the same
// values as if it had stepped with the active ranks.
//
// This holds because every step issues the same collectives: the same units run in the same order
// on every rank (as FSDP already needs) and the first forward, which prefetches nothing, issues its
// all-gathers in the order later ones do. What the log cannot know is refused or stated: a Join
// without a step is refused (the active ranks' next all-gathers would read this rank's stale shard),
// as is a SyncBatchNorm (its all-reduces are inside the forward, as under DDP); a rank that joins
// without having run one step under the Join has no log, and says so in one line; a step whose
// collectives differ from this rank's last (no_sync micro-batches in another number, a
// summon_full_params inside the step) is the user's own collectives between steps, as for DDP.
void FullyShardedDataParallel::check_joinable(const JoinOptions& opts) const {
  MT_CHECK(opts.step, "Join: a FullyShardedDataParallel model needs JoinOptions::step calling its FsdpOptimizer's "
           "step() (and clip_grad_norm, if the loop clips): the other ranks' next all-gathers read this rank's shard");
  MT_CHECK(pg_->size() == 1 || !has_sync_batchnorm(*module_),
           "Join cannot shadow SyncBatchNorm's statistics all-reduce: a rank out of data would leave the others' "
           "forward without a partner. Give every rank the same number of batches instead, or use plain BatchNorm");
}

void FullyShardedDataParallel::join_step_begins() {
  logging_ = true;
  step_log_.clear();
}

void FullyShardedDataParallel::join_ended() {
  logging_ = false;
  step_log_.clear();
}

void FullyShardedDataParallel::log_collective(Collective kind, size_t u) {
  if (logging_) step_log_.emplace_back(kind, u);
}

void FullyShardedDataParallel::shadow_step() {
  MT_CHECK(!step_log_.empty(), "Join: this rank joined before running a step under the Join; under "
           "FullyShardedDataParallel a joined rank repeats its own last step's collectives (Note [FSDP Join]), so "
           "every rank needs at least one batch");
  const int64_t world = pg_->size(), rank = pg_->rank();
  for (const auto& [kind, u] : step_log_) {
    if (kind == Collective::Buffers) {
      broadcast_buffers(*pg_, module_->named_buffers());
      continue;
    }
    const Tensor& shard = units_[u]->shard;
    const int64_t n = layouts_[u].shard;
    if (kind == Collective::Gather) {
      Tensor out = empty({n * world}, {.dtype = shard.dtype(), .device = shard.device()});
      Tensor mine = raw::narrow(out, 0, rank * n, n);
      raw::copy_(mine, shard);
      pg_->allgather_into(out, mine)->wait();
    } else {
      Tensor zero = zeros({n * world}, {.dtype = shard.dtype(), .device = shard.device()});
      Tensor mine = empty({n}, {.dtype = shard.dtype(), .device = shard.device()});
      pg_->reduce_scatter(mine, zero, ReduceOp::Sum)->wait();
      units_[u]->shard_grad = mine;
    }
  }
}

}  // namespace mt::dist
