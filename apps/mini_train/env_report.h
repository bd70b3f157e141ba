// `mini_train --env`: what this machine offers for training — CPU, memory, GPUs and drivers, the
// CUDA/NCCL/Gloo support compiled into this build — with a hint for each thing that is missing.
#pragma once

namespace mt::app {

// Prints the report on stdout. Never fails: what cannot be found is reported as missing.
void print_env_report();

}  // namespace mt::app
