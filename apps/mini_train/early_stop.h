// --early-stop PATIENCE: training ends when the --eval score (test, or --val-split's validation)
// has not improved for PATIENCE epochs in a row, and the saved model is the best epoch's weights,
// not the last epoch's: the line at the end names the epoch kept and its score. Better means a
// higher accuracy or a lower loss; an equal score is no improvement.
//
// Rank 0 scores, so rank 0 decides; under --nproc/--gpus its decision is broadcast after every
// epoch, so that every rank leaves the loop after the same epoch (a rank that trained on would
// wait in its next collective for peers that left). The best weights are a copy in host memory on
// rank 0, made when the score improves. Checkpoints are written as without --early-stop (each
// epoch's own weights); a resumed run counts afresh from its first epoch.
#pragma once

#include <cstdint>
#include <string>

#include "apps/mini_train/evaluate.h"
#include "nn/module.h"
#include "nn/safetensors.h"

namespace mt::app {

class EarlyStop {
 public:
  explicit EarlyStop(int64_t patience) : patience_(patience) {}

  // After epoch `epoch`'s score `s` (rank 0): copies `model`'s weights when they are the best so far.
  // Returns true when the last `patience` epochs brought no improvement: training should stop.
  bool update(int64_t epoch, const Score& s, const nn::Module& model);
  // Puts the best epoch's weights back into `model` (rank 0, after training) and returns the line
  // that says what the saved model is; `split` names the scored data ("test", "validation").
  // `stopped_after`: the epoch training stopped after, 0 when it ran all its epochs.
  std::string restore_best(nn::Module& model, const char* split, int64_t stopped_after);

  int64_t best_epoch() const { return best_epoch_; }
  const Score& best() const { return best_; }

 private:
  int64_t patience_;
  int64_t best_epoch_ = 0, since_best_ = 0;  // best_epoch_ 0: no score yet
  Score best_;
  NamedTensors best_weights_;
};

}  // namespace mt::app
