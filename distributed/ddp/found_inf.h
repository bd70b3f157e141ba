// The found-inf decision of a GradScaler (optim/grad_scaler.h) made once for the whole job: every
// rank of a data-parallel run must skip a step together or step together, or their parameters part
// and never meet again.
//
//   scaler.set_found_inf_reduction(dist::any_rank_found_inf(ddp->process_group()));
//
// Note [One found-inf for all ranks]: under plain DDP the gradients a rank checks are the all-reduced
// average, so an inf or NaN on one rank already reaches all of them (inf + x = inf, NaN spreads). But
// not always: ZeRO and FSDP ranks check only their own shard of the gradients, a comm hook may
// change values, a gradient may be edited after backward. So each unscale_ all-reduces one flag
// with Max: one scalar collective per step, latency only, and the decision (skip, back off) is
// identical on every rank by construction rather than by luck. optim/ cannot make the call itself
// (it sits below distributed/), so the scaler takes the reduction as a function, and this is it.
#pragma once

#include <memory>

#include "distributed/process_group/process_group.h"
#include "optim/grad_scaler.h"

namespace mt::dist {

// A FoundInfReduction that all-reduces (Max) this rank's flag over `pg` and waits: a COLLECTIVE,
// which every rank's GradScaler::unscale_ calls once per step, in the same order as the rest.
optim::FoundInfReduction any_rank_found_inf(std::shared_ptr<ProcessGroup> pg);

}  // namespace mt::dist
