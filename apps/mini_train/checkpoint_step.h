// --checkpoint-every N: checkpoints between epoch ends, and a resume that continues mid-epoch at
// exactly the batch where such a checkpoint was taken. The trainer (trainer.cpp) decides when,
// checkpoint_writer.cpp writes the file; this file holds what a mid-epoch checkpoint adds to an epoch checkpoint and how
// it comes back.
//
// Note [Mid-epoch resume]: a resumed run ends at the same bits as one never interrupted when every
// piece of state that decides the rest of training comes back:
//   - model, optimizer, schedule and the random generator: as in any checkpoint (nn/checkpoint.h);
//   - the data order: nothing to save, an epoch's order is a pure function of (seed, epoch) (Note
//     [Epoch seeding] in data/sampler.h), so the checkpoint records the epoch in progress and the
//     batches already taken (Checkpoint::epoch_batches), and the resumed loader starts at that batch
//     (DataLoader::begin_at); the batches before it are not even built;
//   - the step counter (Checkpoint::step), from which --check-replicas, --max-steps and the next
//     --checkpoint-every are counted;
//   - the epoch's running loss, for the epoch line and --log-json: each rank's own (Σ loss·n, n) so
//     far, gathered from every rank into one (world, 2) float64 tensor ("progress/loss_sums") by one
//     small all-reduce (rank r fills row r, the others add zeros: exact). Each resumed rank takes its
//     row back, so the epoch-end all-reduce sums the same numbers in the same order;
//   - the JSON log: records past the checkpoint are dropped on resume (a failure after a record but
//     before the next checkpoint would otherwise log those steps and epochs twice: Note [Log records]).
// A mid-epoch checkpoint resumes only with the same number of ranks (the epoch's split depends on it).
#pragma once

#include <cstdint>
#include <string>

#include "apps/mini_train/options.h"
#include "distributed/process_group/process_group.h"
#include "nn/checkpoint.h"

namespace mt::app {

// This rank's part of the epoch in progress.
struct EpochProgress {
  int64_t batches = 0;   // batches of the epoch already trained on
  double loss_sum = 0;   // Σ loss · batch size over them
  int64_t seen = 0;      // examples in them
};

// Whether a step checkpoint follows global step `step`: every --checkpoint-every steps, except at
// the end of an epoch (`epoch_done`), where the epoch's own checkpoint is written instead.
bool step_checkpoint_due(const Options& opts, int64_t step, bool epoch_done);

// Every rank's EpochProgress loss sums as a (world, 2) float64 CPU tensor, row r = rank r's
// (loss_sum, seen). Collective: every rank calls it at the same step. pg null: one process.
Tensor gather_progress(dist::ProcessGroup* pg, int world, int rank, const EpochProgress& mine);

// Adds what a mid-epoch checkpoint carries (Note [Mid-epoch resume]) to `c`.
void add_progress(Checkpoint& c, int64_t batches, const Tensor& loss_sums);

// This rank's EpochProgress from checkpoint `c` (read from `from`): all zeros for an epoch
// checkpoint. Refuses a mid-epoch checkpoint of another world size, naming both.
EpochProgress resumed_progress(const Checkpoint& c, int world, int rank, const std::string& from);

}  // namespace mt::app
