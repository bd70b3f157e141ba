// Join (see join.h, Note [Join]): one count per step, and the joined rank's shadow loop.
#include "distributed/ddp/ddp_join.h"

#include <exception>

namespace mt::dist {

// Without a step, plain DDP's joined replicas only fall behind; ZeRO's active ranks would wait in
// an all-gather that the joined rank never joins (Note [Join]).
Join::Join(DistributedDataParallel& ddp, JoinOptions opts) : ddp_(ddp), opts_(std::move(opts)) {
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
