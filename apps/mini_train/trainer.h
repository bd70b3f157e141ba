// The training run: config table, epochs with per-epoch lines and checkpoints, resume, evaluation
// and the final save, in this process or as one rank of a data-parallel job (trainer.cpp).
#pragma once

#include "apps/mini_train/options.h"

namespace mt::dist {
class Heartbeat;
}

namespace mt::app {

// Runs the job the options describe. Throws mt::Error on bad input; returns the exit code.
// `heartbeat`: this process's beat to its launcher (main.cpp starts it), null when none watches.
int train(const Options& opts, dist::Heartbeat* heartbeat);

}  // namespace mt::app
