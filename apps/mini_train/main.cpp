// mini_train: the command-line trainer. Parses options, then either reports the environment or
// trains: in this process, as one rank of a distributed job, or by launching --nproc workers. Every
// error becomes one line on stderr and exit code 1; option errors exit with 2 (via CLI11, which
// prints the usage hint).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "apps/mini_train/env_report.h"
#include "apps/mini_train/launcher.h"
#include "apps/mini_train/options.h"
#include "apps/mini_train/trainer.h"
#include "tensor/check.h"

int main(int argc, char** argv) {
  try {
    mt::app::Options opts;
    int exit_code = 0;
    if (!mt::app::parse_options(argc, argv, opts, &exit_code)) return exit_code;
    if (opts.env) {
      mt::app::print_env_report();
      return 0;
    }
    // --nproc N launches N workers; a worker (RANK set by the launcher, torchrun or srun) trains as
    // its rank (trainer.cpp) and never launches again.
    if (opts.nproc >= 2 && !std::getenv("RANK")) return mt::app::launch(argc, argv, opts);
    return mt::app::train(opts);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "mini_train: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mini_train: error: %s\n", e.what());
  }
  return 1;
}
