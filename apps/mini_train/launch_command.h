// `mini_train launch`: the --nproc launcher for any program built on the library (launch_command.cpp).
//
//   mini_train launch --nproc N [--backend gloo|mpi|auto] [--max-restarts K] [--heartbeat-timeout S]
//                     [--master-port P] -- PROGRAM [ARGS...]
#pragma once

namespace mt::app {

// argv[1] is "launch". Returns the launcher's exit code (2: a command line that does not parse).
int run_launch(int argc, char** argv);

}  // namespace mt::app
