// --checkpoint-format sharded (the default under --zero 1|2): each rank writes the optimizer state it
// holds to a shard file of its own, all ranks at once, and rank 0 writes the index once every shard
// is complete (Note [Sharded checkpoints] in nn/sharded_checkpoint.h). The model's weights, alike on
// every rank under ZeRO-1 and -2, go into rank 0's shard, once. Reading needs nothing here:
// load_checkpoint reads an index as it reads a single file, so --resume, --resume auto (which skips
// a checkpoint whose shard is missing or damaged, Note [Damaged checkpoints]), `mini_train
// consolidate` (consolidate.h) and eval/predict/generate take either form.
#pragma once

#include <string>

#include "apps/mini_train/run.h"
#include "distributed/zero/zero.h"
#include "nn/checkpoint.h"

namespace mt::app {

// Whether this run's checkpoints are sharded.
bool sharded_checkpoints(const Run& r);

// The run's ZeRO optimizer, whose local_state() a shard holds (ZeRO-3's parameter shards would be
// one more provider of pieces: nn/sharded_state.h).
const dist::ZeroRedundancyOptimizer& zero_optimizer(const Run& r);

// A COLLECTIVE: the checkpoint `c` (on rank 0: its counters, info, model, scheduler and progress;
// ignored elsewhere) with every rank's optimizer shard, index at `path`.
void save_sharded(const Run& r, const std::string& path, const Checkpoint& c);

}  // namespace mt::app
