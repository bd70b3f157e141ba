// `mini_train --env`: what this machine offers for training — CPU, memory, GPUs and drivers, the
// CUDA/NCCL/Gloo support compiled into this build — with a hint for each thing that is missing; and
// `mini_train --version`, that build in one line.
#pragma once

namespace mt::app {

// Prints the report on stdout. Never fails: what cannot be found is reported as missing.
void print_env_report();

// `mini_train --version`: one line, "mini_train 0.1.0 (<git describe>), CUDA yes, MPI no, Gloo yes",
// the version and commit as CMake saw them when it configured this build.
void print_version();

}  // namespace mt::app
