// any_rank_found_inf (see found_inf.h): one float on the group's device, all-reduced with Max.
#include "distributed/ddp/found_inf.h"

namespace mt::dist {

optim::FoundInfReduction any_rank_found_inf(std::shared_ptr<ProcessGroup> pg) {
  MT_CHECK(pg != nullptr, "any_rank_found_inf: needs a process group");
  return [pg = std::move(pg)](bool found_inf) {
    Tensor flag = full({1}, found_inf ? 1.0 : 0.0, {.device = pg->device()});
    pg->allreduce(flag, ReduceOp::Max)->wait();
    return flag.to(kCPU).item() != 0.0;
  };
}

}  // namespace mt::dist
