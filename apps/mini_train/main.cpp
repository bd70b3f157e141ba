// mini_train: the command-line trainer. Parses options, then either reports the environment or
// trains: in this process, as one rank of a distributed job, or by launching workers (--nproc N, or
// one per GPU of --gpus). `mini_train eval` and `mini_train predict` use a saved model instead
// (inference.h); `mini_train generate` continues a prompt with a saved GPT (generate.h); `mini_train
// plot` draws --log-json files (plot.h); `mini_train launch -- PROGRAM` runs any program of the
// library's as N supervised ranks (launch_command.h). Every error becomes one line on stderr and exit
// code 1; a command line that does not parse is one line too, with exit code 2.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "apps/mini_train/env_report.h"
#include "apps/mini_train/consolidate.h"
#include "apps/mini_train/generate.h"
#include "apps/mini_train/gpus.h"
#include "apps/mini_train/inference.h"
#include "apps/mini_train/launch_command.h"
#include "apps/mini_train/launcher.h"
#include "apps/mini_train/options.h"
#include "apps/mini_train/plot.h"
#include "apps/mini_train/test_hooks.h"
#include "apps/mini_train/trainer.h"
#include "distributed/fault/heartbeat.h"
#include "distributed/process_group/mpi/process_group_mpi.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/tcp_store.h"
#include "tensor/backend.h"
#include "tensor/check.h"
#include "tensor/parallel.h"

namespace {

// "rank 3: " in a worker of a distributed job, so that its error line names it; "" otherwise.
std::string rank_prefix() {
  try {
    const auto job = mt::dist::rendezvous_from_env();
    if (job && job->world_size > 1) return "rank " + std::to_string(job->rank) + ": ";
  } catch (const std::exception&) {
    // a malformed environment was the error being reported
  }
  return "";
}

// A training process's life, watched from start to exit (Note [Watched from start to exit] in
// distributed/fault/heartbeat.h): the heartbeat to a launcher first, then init (the rendezvous or
// MPI_Init, inside train), the run, and finalize: the group closed, then MPI_Finalize, which waits
// for every rank, still under the heartbeat.
int run_training(const mt::app::Options& opts) {
  const std::unique_ptr<mt::dist::Heartbeat> heartbeat = mt::dist::Heartbeat::from_env();
  const auto job = mt::dist::rendezvous_from_env();
  const int rank = job ? job->rank : 0;
  mt::dist::set_phase(mt::dist::Phase::Init);
  if (heartbeat) heartbeat->beat_now();  // Note [Current phase]
  mt::app::test_stop_hook(rank, mt::dist::Phase::Init);
  const int exit_code = mt::app::train(opts, heartbeat.get());  // its process group is closed on return
  // What it printed ("saved ...") is out before finalize, where it may be stopped and killed.
  std::fflush(stdout);
  std::fflush(stderr);
  mt::dist::set_phase(mt::dist::Phase::Finalize);
  if (heartbeat) heartbeat->beat_now();
  mt::app::test_stop_hook(rank, mt::dist::Phase::Finalize);
  mt::dist::ProcessGroupMPI::finalize();
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // The GEMM library (Note [Which GEMM], cmake/Dependencies.cmake), settled before any command:
    // a malformed MT_GEMM is an error here even where the model's GEMMs are too small to reach it.
    mt::cpu_gemm_library();
    // Every descriptor the hard limit allows: a rank hosting the store keeps a reserve of them from
    // strangers (Note [Strangers] in distributed/store/detail/tcp_store_server.h).
    mt::dist::raise_descriptor_limit();
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "eval") return mt::app::run_eval(argc, argv);
    if (command == "predict") return mt::app::run_predict(argc, argv);
    if (command == "generate") return mt::app::run_generate(argc, argv);
    if (command == "plot") return mt::app::run_plot(argc, argv);
    if (command == "consolidate") return mt::app::run_consolidate(argc, argv);  // consolidate.h
    if (command == "launch") return mt::app::run_launch(argc, argv);  // any program (launch_command.h)
    mt::app::Options opts;
    int exit_code = 0;
    if (!mt::app::parse_options(argc, argv, opts, &exit_code)) return exit_code;
    // The intra-op threads (tensor/parallel.h), settled before any work: a malformed MT_NUM_THREADS
    // is an error here. Workers of --nproc parse the same flag; without it each takes its share of
    // the cores (LOCAL_WORLD_SIZE, set by the launcher).
    if (opts.threads > 0) mt::set_num_threads(opts.threads);
    if (opts.version) {
      mt::app::print_version();
      return 0;
    }
    if (opts.env) {
      mt::app::print_env_report();
      return 0;
    }
    // --nproc N launches N workers (on each of --nnodes machines); a worker (RANK set by the
    // launcher, torchrun or srun) trains as its rank (trainer.cpp) and never launches again.
    const bool distributed = mt::app::worker_count(opts) >= 2 || opts.nnodes > 1;
    if (distributed && !std::getenv("RANK")) return mt::app::launch(argc, argv, opts);
    mt::get_num_threads();
    return run_training(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mini_train: %serror: %s\n", rank_prefix().c_str(), e.what());
  }
  // A rank of an MPI job ends the whole job instead of waiting for the others at MPI_Finalize
  // (Note [A failing rank aborts the job]); elsewhere this does nothing.
  mt::dist::ProcessGroupMPI::abort_job(1);
  return 1;
}
