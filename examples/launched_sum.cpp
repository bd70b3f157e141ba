// A program of one's own, run as N supervised ranks by `mini_train launch` (Note [Launching any
// program] in apps/mini_train/launch_command.cpp):
//
//   build/mini_train launch --nproc 3 -- build/example_launched_sum
//   build/mini_train launch --nproc 3 --backend mpi -- build/example_launched_sum
//
// Every rank all-reduces rank + 1 and checks the sum, 1 + 2 + ... + N. The launcher set RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or mpirun its own variables), which rendezvous_from_env
// reads, as under torchrun. The first line starts the heartbeat: from then on, a rank that stops
// (SIGSTOP, frozen) is named by the launcher within --heartbeat-timeout. A failure ends every rank,
// and the launcher names the rank and the reason it reported; with --max-restarts K it runs them all
// again, and MT_RESTART_COUNT says which attempt this is.
//
// For the launcher's tests (tests/distributed_launcher/launch.sh), a rank can be made to fail:
//   --fail-rank R [--fail-attempts A]   rank R throws in attempts 0 .. A-1 (default 1: the first)
//   --stop-rank R                        rank R stops itself (SIGSTOP) after meeting the others
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "minitrain.h"

using namespace mt;

namespace {

int flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return std::atoi(argv[i + 1]);
  return fallback;
}

// One rank's work: meet the others, all-reduce, check. Throws on failure.
int run(int argc, char** argv) {
  const auto info = dist::rendezvous_from_env();
  if (!info) {
    std::fprintf(stderr, "launched_sum: no rank in the environment; run me under mini_train launch, torchrun or mpirun\n");
    return 2;
  }
  const char* attempt_env = std::getenv("MT_RESTART_COUNT");
  const int attempt = attempt_env ? std::atoi(attempt_env) : 0;
  if (info->rank == flag(argc, argv, "--fail-rank", -1) && attempt < flag(argc, argv, "--fail-attempts", 1))
    throw std::runtime_error("rank " + std::to_string(info->rank) + " fails on purpose in attempt " +
                             std::to_string(attempt) + " (--fail-rank)");
  dist::set_phase(dist::Phase::Init);
  const auto pg = dist::init_process_group({.rendezvous = *info});
  if (info->rank == flag(argc, argv, "--stop-rank", -1)) std::raise(SIGSTOP);
  Tensor x = from_vector(std::vector<int64_t>{info->rank + 1}, {1});
  pg->allreduce(x)->wait();
  const int64_t sum = x.to_vector<int64_t>()[0], n = info->world_size;
  if (sum != n * (n + 1) / 2)
    throw std::runtime_error("the sum is " + std::to_string(sum) + ", expected " + std::to_string(n * (n + 1) / 2));
  std::printf("rank %d of %d (%s, attempt %d): sum %lld\n", info->rank, info->world_size, pg->backend().c_str(),
              attempt, static_cast<long long>(sum));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto heartbeat = dist::Heartbeat::from_env();  // first: watched from here on
  try {
    const int exit_code = run(argc, argv);  // its process group is gone on return
    // Under the heartbeat still: MPI_Finalize waits for every rank (Note [Watched from start to exit]).
    dist::set_phase(dist::Phase::Finalize);
    std::fflush(stdout);
    dist::ProcessGroupMPI::finalize();
    return exit_code;
  } catch (const std::exception& e) {
    if (heartbeat) heartbeat->report_failure(e);  // the launcher names this rank with this reason
    std::fprintf(stderr, "launched_sum: error: %s\n", e.what());
    dist::ProcessGroupMPI::abort_job(1);  // under MPI: end every rank now (Note [A failing rank aborts the job])
    return 1;
  }
}
