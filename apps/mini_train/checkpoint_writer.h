// mini_train's checkpoint writers: the epoch checkpoint (--checkpoint-dir, every epoch end) and the
// step checkpoint (--checkpoint-every N, between epoch ends; what it adds is in checkpoint_step.h).
// Rank 0 writes and prunes to --keep; under --zero every rank takes part: each writes its own
// shard (--checkpoint-format sharded, checkpoint_sharded.h), or the optimizer's state_dict gathers
// every rank's shard for rank 0's single file (a collective). The trainer (trainer.cpp) decides when;
// reading a checkpoint back is the trainer's resume phase.
#pragma once

#include <cstdint>

#include "apps/mini_train/checkpoint_step.h"
#include "apps/mini_train/run.h"

namespace mt::app {

// The checkpoint of epoch `epoch` (its mean loss `loss`), when --checkpoint-dir is set. Every rank
// calls it (a no-op where it has nothing to do).
void write_checkpoint(Run& r, int64_t epoch, double loss);

// --checkpoint-every, during `epoch`: every rank gathers the epoch's loss sums, rank 0 writes
// (Note [Mid-epoch resume]); the checkpoint's loss is the epoch's running mean so far. Every rank
// calls it at the same step.
void write_step_checkpoint(Run& r, int64_t epoch, const EpochProgress& progress);

}  // namespace mt::app
