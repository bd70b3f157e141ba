// Join (see ddp_join.h, Note [Join]): one count per step, the joined rank's shadow loop, and DDP as
// a Joinable.
#include "distributed/ddp/ddp_join.h"

#include <exception>

#include "distributed/ddp/sync_batchnorm.h"

namespace mt::dist {

namespace {

// DistributedDataParallel as Join sees it: a step's collectives are its shadow backward.
class DdpJoinable final : public Joinable {
 public:
  explicit DdpJoinable(DistributedDataParallel& ddp) : ddp_(ddp) {}
  ProcessGroup& join_process_group() override { return *ddp_.process_group(); }
  void shadow_step() override { ddp_.shadow_backward(); }

  // Without a step, plain DDP's joined replicas only fall behind; ZeRO's active ranks would wait in
  // an all-gather that the joined rank never joins (Note [Join]). A synchronised BatchNorm's
  // all-reduces are not DDP's, so a joined rank could not answer them (Note [Join]).
  void check_joinable(const JoinOptions& opts) const override {
    MT_CHECK(ddp_.process_group()->size() == 1 || !has_sync_batchnorm(*ddp_.module()),
             "Join cannot shadow SyncBatchNorm's statistics all-reduce: a rank out of data would leave the "
             "others' forward without a partner. Give every rank the same number of batches (drop_last, "
             "DistributedSampler) instead of a Join, or use plain BatchNorm");
    MT_CHECK(opts.step || ddp_.stats().comm_hook != "zero",
             "Join: this DDP model trains with a ZeroRedundancyOptimizer, so JoinOptions::step must be set and "
             "call its step(): the other ranks' steps all-gather from this rank's shard");
  }

 private:
  DistributedDataParallel& ddp_;
};

}  // namespace

Join::Join(DistributedDataParallel& ddp, JoinOptions opts)
    : opts_(std::move(opts)), adapter_(std::make_unique<DdpJoinable>(ddp)), joinable_(*adapter_) {
  joinable_.check_joinable(opts_);
}

Join::Join(Joinable& joinable, JoinOptions opts) : opts_(std::move(opts)), joinable_(joinable) {
  joinable_.check_joinable(opts_);
}

Join::~Join() noexcept(false) {
  if (!joined_ && std::uncaught_exceptions() == 0) join();
}

int64_t Join::count_active(int64_t mine) {
  ProcessGroup& pg = joinable_.join_process_group();
  Tensor count = from_vector(std::vector<int64_t>{mine}, {1}).to(pg.device());
  pg.allreduce(count, ReduceOp::Sum)->wait();
  return count.to(kCPU).to_vector<int64_t>()[0];
}

int64_t Join::step() {
  MT_CHECK(!joined_, "Join::step after join(): this rank has no more data");
  const int64_t active = count_active(1);
  joinable_.join_step_begins();
  return active;
}

int64_t Join::join() {
  MT_CHECK(!joined_, "Join::join called twice");
  joined_ = true;
  int64_t shadowed = 0;
  while (count_active(0) > 0) {
    joinable_.shadow_step();
    if (opts_.step) opts_.step();
    ++shadowed;
  }
  joinable_.join_ended();
  return shadowed;
}

}  // namespace mt::dist
