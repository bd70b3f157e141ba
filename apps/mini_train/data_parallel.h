// mini_train's data-parallel set-up, once the model holds its --init/--resume state: --sync-bn, the
// DistributedDataParallel wrapper with its --comm-hook, and under --zero 1|2 the optimizer replaced by
// this rank's shard of itself (distributed/zero/zero.h), or under --zero 3 FullyShardedDataParallel
// instead of DDP, with the optimizer over its shards (distributed/zero/fsdp.h); and --clip-grad, which under --zero is a
// collective over the shards. The trainer (trainer.cpp) calls these. One process has no DDP: there
// --zero and --comm-hook are refused, and the DDP options it would ignore are warned about.
#pragma once

#include "apps/mini_train/run.h"

namespace mt::app {

// A distributed run (r.pg set): wraps r.model in DDP (every rank loaded the same state; DDP checks
// and broadcasts rank 0's) and, with --zero 1|2, shards the optimizer. One process: the checks above.
void set_up_data_parallel(Run& r);

// --clip-grad: over the whole model's reduced gradients; under --zero 1|2 only the shards are reduced,
// so the norm is summed over them (a collective, ZeroRedundancyOptimizer::clip_grad_norm). Under
// --precision fp16 the GradScaler unscales the gradients first.
void clip_gradients(Run& r);

}  // namespace mt::app
