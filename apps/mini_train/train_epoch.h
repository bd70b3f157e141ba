// One epoch of mini_train's training loop (trainer.cpp runs the epochs): the loader's batches, each
// a micro-batch (--accumulate, accumulate.h) of forward and backward; after a step's last one
// --clip-grad, the optimizer and the schedule; after each step its --log-every record, --check-replicas
// and a --checkpoint-every checkpoint. A mid-epoch resume starts at its checkpoint's batch (Note
// [Mid-epoch resume]). Every rank runs it; the epoch's loss is the mean over every rank's samples.
#pragma once

#include <cstdint>

#include "apps/mini_train/run.h"

namespace mt::app {

struct EpochResult {
  double loss = 0;           // mean over every rank's samples
  double samples_per_s = 0;  // every rank's samples
  double seconds = 0;
};

// Trains epoch `epoch` (1-based) of the run; r.step counts its optimizer steps.
EpochResult train_epoch(Run& r, int64_t epoch);

}  // namespace mt::app
