// bench_allreduce [WORLD]: the latency of one allreduce (issue + wait, Sum, float32) between WORLD
// processes (default 2) on this machine, with ProcessGroupGloo over loopback TCP; run under mpirun
// (`mpirun -np WORLD build/bench/bench_allreduce`), the same with ProcessGroupMPI. Four sizes:
//   11 floats        the seed model's whole gradient (Linear(10, 1): 10 weights + 1 bias)
//   1,000 floats     a small bucket
//   16,384 floats    a middle point, for fitting a latency-bandwidth model (scripts/scaling_model.py)
//   203,530 floats   the Fashion-MNIST MLP's gradient (784·256 + 256 + 256·10 + 10), as one bucket
//                    (about the size of the GPT preset's buckets at --bucket-cap-mb 1)
// Over Gloo the program forks itself: the parent is rank 0 (it measures and prints), the children ranks 1...
// All ranks must run the same number of allreduces, so rank 0 picks the iteration count from a
// warm-up and broadcasts it (itself a small demonstration of a collective deciding for everyone).
//
// Options, after WORLD (or alone under mpirun): --sizes N,N,... (element counts instead of the four
// above) and --unguarded (allreduce_own_guard instead of allreduce: no guard of the plain all-reduce,
// Note [Collective guard]; the lines then end in "_unguarded_us"), so that a guard's cost is the
// difference of two runs:
//   bench_allreduce 2 --sizes 1024,262144,4194304; bench_allreduce 2 --sizes 1024,262144,4194304 --unguarded
//
// Output, like bench_core: `minitrain allreduce_<n>_us <median µs>` on stdout (`allreduce_<n>_<W>ranks_us`
// for other world sizes than 2; `mpi_allreduce_...` under mpirun); the spread of the
// repetitions and the bandwidth on stderr. Wall time only: the work happens on Gloo's and the
// process group's threads, so the calling thread's CPU time would say nothing.
// Not measured here: other machines, overlap with computation (DDP's business).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <exception>
#include <vector>

#include "minitrain.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReps = 7;
constexpr double kRepSeconds = 0.25;

struct Config {
  std::vector<int64_t> sizes{11, 1000, 16384, 203530};
  bool unguarded = false;
};
Config config;  // from the command line, once, before any rank starts

// argv[first..]: --sizes N,N,... and --unguarded; false on anything else.
bool parse_options(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--unguarded") {
      config.unguarded = true;
    } else if (a == "--sizes" && i + 1 < argc) {
      config.sizes.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long long n = std::strtoll(p, &end, 10);
        if (end == p || n < 1) return false;
        config.sizes.push_back(n);
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') return false;
      }
    } else {
      return false;
    }
  }
  return !config.sizes.empty();
}

double seconds_of_allreduces(mt::dist::ProcessGroup& pg, mt::Tensor& t, int64_t iters) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < iters; ++i) (config.unguarded ? pg.allreduce_own_guard(t) : pg.allreduce(t))->wait();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void bench_size(mt::dist::ProcessGroup& pg, int64_t numel) {
  mt::Tensor t = mt::full({numel}, 1.0);
  // Warm-up (connections, caches, allocator), timed on rank 0 to choose the iteration count.
  const double warm = seconds_of_allreduces(pg, t, 20) / 20;
  mt::Tensor iters = mt::from_vector(std::vector<int64_t>{std::max<int64_t>(1, kRepSeconds / warm)}, {1});
  pg.broadcast(iters, 0)->wait();  // the others run what rank 0 decided
  const int64_t n = iters.to_vector<int64_t>()[0];

  std::vector<double> per_call;
  for (int r = 0; r < kReps; ++r) per_call.push_back(seconds_of_allreduces(pg, t, n) / static_cast<double>(n));
  std::sort(per_call.begin(), per_call.end());
  if (pg.rank() != 0) return;
  const double median = per_call[kReps / 2];
  char ranks[32] = "";  // "_3ranks" beyond 2 ranks (a char buffer: GCC 12 warns, falsely, on "_" + std::string)
  if (pg.size() != 2) std::snprintf(ranks, sizeof ranks, "_%dranks", pg.size());
  std::printf("minitrain %sallreduce_%lld%s%s_us %.4g\n", pg.backend() == std::string("mpi") ? "mpi_" : "",
              static_cast<long long>(numel), ranks, config.unguarded ? "_unguarded" : "", median * 1e6);
  std::fflush(stdout);
  // Bus bandwidth as NCCL's tests define it for allreduce: 2·(n-1)/n · bytes / time.
  const double bytes = 2.0 * (pg.size() - 1) / pg.size() * static_cast<double>(numel) * sizeof(float);
  std::fprintf(stderr, "# allreduce %7lld floats, %d ranks: median %.4g us, min %.4g, max %.4g; %d reps x %lld; "
               "bus bandwidth %.3g GB/s\n", static_cast<long long>(numel), pg.size(), median * 1e6, per_call.front() * 1e6,
               per_call.back() * 1e6, kReps, static_cast<long long>(n), bytes / median * 1e-9);
}

void bench_sizes(mt::dist::ProcessGroup& pg) {
  for (const int64_t numel : config.sizes) bench_size(pg, numel);
}

// Under mpirun: every process is a rank already; MPI's launcher told it which.
int run_mpi() {
  try {
    auto pg = mt::dist::init_process_group({.backend = "mpi", .timeout = std::chrono::seconds(60)});
    bench_sizes(*pg);
    pg->barrier()->wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce (mpi): %s\n", e.what());
    return 1;
  }
}

int run_rank(int rank, int world, int port) {
  try {
    auto pg = mt::dist::init_process_group(
        {.backend = "gloo",
         .rendezvous = {.rank = rank, .world_size = world, .local_rank = rank, .local_world_size = world,
                        .master_addr = "127.0.0.1", .master_port = port},
         .timeout = std::chrono::seconds(60)});
    bench_sizes(*pg);
    pg->barrier()->wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce rank %d: %s\n", rank, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: bench_allreduce [WORLD] [--sizes N,N,...] [--unguarded]   (2 to 64 ranks; default 2)\n";
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  const bool has_world = argc > 1 && argv[1][0] != '-';
  if (!parse_options(argc, argv, has_world ? 2 : 1)) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  if (under_mpirun) return run_mpi();
  const int world = has_world ? std::atoi(argv[1]) : 2;
  if (world < 2 || world > 64) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  if (!mt::dist::ProcessGroupGloo::is_available()) {
    std::fprintf(stderr, "bench_allreduce: this build has no Gloo; nothing to measure\n");
    return 0;
  }
  const int port = mt::dist::find_free_port();
  std::fflush(stdout);
  const pid_t parent = ::getpid();
  std::vector<pid_t> children;
  for (int rank = 1; rank < world; ++rank) {
    const pid_t child = ::fork();
    if (child < 0) {
      std::perror("fork");
      for (const pid_t c : children) ::kill(c, SIGKILL);
      return 1;
    }
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive rank 0
      if (::getppid() != parent) ::_exit(1);
      ::_exit(run_rank(rank, world, port));
    }
    children.push_back(child);
  }
  const int rc = run_rank(0, world, port);
  bool all_ok = rc == 0;
  for (const pid_t c : children) {
    if (rc != 0) ::kill(c, SIGKILL);
    int status = 0;
    ::waitpid(c, &status, 0);
    all_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return all_ok ? 0 : 1;
}
