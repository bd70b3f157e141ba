// ZeroHook: a DDP bucket reduce-scattered instead of all-reduced (see zero.h, Note [ZeRO shards]).
#include "distributed/fault/detail/desync_guard.h"
#include "distributed/zero/zero.h"
#include "tensor/raw_ops.h"

namespace mt::dist {

ZeroShard zero_shard(int64_t numel, int world) {
  MT_CHECK(numel >= 0 && world >= 1, "zero_shard: ", numel, " elements over ", world, " ranks");
  const int64_t q = numel / world;
  return {.numel = numel, .shard = q, .body = q * world};
}

// Note [Averaging] holds as for the default hook: the whole bucket (guard included) is divided by
// the world size first, then summed. Both collectives go out now, in this order on every rank, so
// they pair up (Note [Bucket launch order]); DDP waits for the second, finish() for the first.
// Stage 2 reduce-scatters into its kept shard instead of in place (Note [ZeRO-2: only the shard
// stays]).
std::shared_ptr<Work> ZeroHook::launch(ProcessGroup& pg, GradBucket& bucket) {
  const int64_t numel = bucket.buffer.numel() - detail::DesyncGuard::kElements;
  const ZeroShard split = zero_shard(numel, pg.size());
  if (pg.size() > 1) bucket.buffer.mul_(1.0 / pg.size());
  if (split.shard > 0) {
    const Tensor body = raw::narrow(bucket.buffer, 0, 0, split.body);
    Tensor mine = kept_.empty() ? raw::narrow(body, 0, pg.rank() * split.shard, split.shard)
                                : raw::narrow(kept_.at(bucket.index), 0, 0, split.shard);
    scattering_[bucket.index] = pg.reduce_scatter(mine, body, ReduceOp::Sum);
  }
  Tensor tail = raw::narrow(bucket.buffer, 0, split.body, bucket.buffer.numel() - split.body);
  if (kept_.empty()) return pg.allreduce(tail, ReduceOp::Sum);
  Tensor& copy = tails_[bucket.index] = raw::clone(tail);  // Note [ZeRO-2: only the shard stays]
  return pg.allreduce(copy, ReduceOp::Sum);
}

// The reduce-scatter was issued before the tail's all-reduce, so it is normally long done. Its Work
// is dropped only once waited for, so that a failure seen here is seen again by finalize.
void ZeroHook::finish(ProcessGroup& pg, GradBucket& bucket) {
  const auto it = scattering_.find(bucket.index);
  if (it != scattering_.end() && it->second) {
    it->second->wait();
    it->second.reset();
  }
  if (kept_.empty()) return;
  const ZeroShard split = zero_shard(bucket.buffer.numel() - detail::DesyncGuard::kElements, pg.size());
  Tensor sums = raw::narrow(bucket.buffer, 0, split.body, bucket.buffer.numel() - split.body);
  raw::copy_(sums, tails_.at(bucket.index));  // the tail and guard, all-reduced
  const int64_t tail = split.numel - split.body;
  if (tail > 0) raw::copy_(raw::narrow(kept_.at(bucket.index), 0, split.shard, tail),
                           raw::narrow(bucket.buffer, 0, split.body, tail));
}

}  // namespace mt::dist
