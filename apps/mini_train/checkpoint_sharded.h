// --checkpoint-format sharded (the default under --zero): each rank writes the state it holds to a
// shard file of its own, all ranks at once, and rank 0 writes the index once every shard is complete
// (Note [Sharded checkpoints] in nn/sharded_checkpoint.h). Under ZeRO-1 and -2 a rank holds its
// pieces of the optimizer state, and the model's weights, alike on every rank, go into rank 0's
// shard, once. Under ZeRO-3 a rank holds its pieces of the weights too (FullyShardedDataParallel's
// and FsdpOptimizer's local_state_dict): nothing is gathered to save them, so no rank ever holds the
// whole model or optimizer state for a checkpoint. Reading needs nothing here: load_checkpoint reads
// an index as it reads a single file, so --resume, --resume auto (which skips a checkpoint whose
// shard is missing or damaged, Note [Damaged checkpoints]), `mini_train consolidate`
// (consolidate.h) and eval/predict/generate take either form.
#pragma once

#include <string>

#include "apps/mini_train/run.h"
#include "distributed/zero/zero.h"
#include "nn/checkpoint.h"

namespace mt::app {

// Whether this run's checkpoints are sharded.
bool sharded_checkpoints(const Run& r);

// The run's ZeRO-1/2 optimizer, whose local_state() a shard holds.
const dist::ZeroRedundancyOptimizer& zero_optimizer(const Run& r);

// A COLLECTIVE: the checkpoint `c` (on rank 0: its counters, info, model, scheduler and progress;
// ignored elsewhere; under --zero 3 its model is empty, the buffers are read here) with every rank's
// optimizer shard (and, under --zero 3, parameter shard), index at `path`.
void save_sharded(const Run& r, const std::string& path, const Checkpoint& c);

}  // namespace mt::app
