// Join (see join.h, Note [Join]): one count per step, and the joined rank's shadow loop.
#include "distributed/ddp/ddp_join.h"

#include <exception>

#include "distributed/ddp/sync_batchnorm.h"

namespace mt::dist {

// Without a step, plain DDP's joined replicas only fall behind; ZeRO's active ranks would wait in
// an all-gather that the joined rank never joins (Note [Join]). A synchronised BatchNorm's
// all-reduces are not DDP's, so a joined rank could not answer them (Note [Join]).
Join::Join(DistributedDataParallel& ddp, JoinOptions opts) : ddp_(ddp), opts_(std::move(opts)) {
  MT_CHECK(ddp_.process_group()->size() == 1 || !has_sync_batchnorm(*ddp_.module()),
           "Join cannot shadow SyncBatchNorm's statistics all-reduce: a rank out of data would leave the "
           "others' forward without a partner. Give every rank the same number of batches (drop_last, "
           "DistributedSampler) instead of a Join, or use plain BatchNorm");
  MT_CHECK(opts_.step || ddp_.stats().comm_hook != "zero",
           "Join: this DDP model trains with a ZeroRedundancyOptimizer, so JoinOptions::step must be set and "
           "call its step(): the other ranks' steps all-gather from this rank's shard");
}

Join::~Join() noexcept(false) {
  if (!joined_ && std::uncaught_exceptions() == 0) join();
}

int64_t Join::count_active(int64_t mine) {
  ProcessGroup& pg = *ddp_.process_group();
  Tensor count = from_vector(std::vector<int64_t>{mine}, {1}).to(pg.device());
  pg.allreduce(count, ReduceOp::Sum)->wait();
  return count.to(kCPU).to_vector<int64_t>()[0];
}

int64_t Join::step() {
  MT_CHECK(!joined_, "Join::step after join(): this rank has no more data");
  return count_active(1);
}

int64_t Join::join() {
  MT_CHECK(!joined_, "Join::join called twice");
  joined_ = true;
  int64_t shadowed = 0;
  while (count_active(0) > 0) {
    ddp_.shadow_backward();
    if (opts_.step) opts_.step();
    ++shadowed;
  }
  return shadowed;
}

}  // namespace mt::dist
