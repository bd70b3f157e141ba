// The one timing method every C++ benchmark in bench/ uses (bench_core.cpp and, through a relative
// include, torch/bench_torch.cpp), so minitrain and libtorch are measured the same way.
// bench_torch.py repeats the same steps in Python. Header-only, C++17 (libtorch 1.13 builds as C++17).
//
//   1. warm-up: call fn for at least kWarmupSeconds (caches, allocator bins, lazy init, BLAS buffers);
//   2. from the warm-up rate pick `iters` so that one repetition lasts about rep_seconds;
//   3. `reps` repetitions of a timed loop of `iters` calls; per-call time = loop time / iters.
// The reported figure is the median repetition, which ignores a repetition that another process
// happened to interrupt; min and max show how much the repetitions spread.
//
// Each loop is timed on two clocks. Wall time (std::chrono::steady_clock) is what a user waits.
// The thread's CPU time (CLOCK_THREAD_CPUTIME_ID) leaves out the time the scheduler gave to other
// processes: on an idle machine the two agree; on a shared 2-core machine under load, wall time
// grows with the load while CPU time stays close to the idle figure. With one thread (the scripts
// set MT_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1) every workload runs on the calling thread, so its
// CPU time is the whole cost; with more (threads.sh), only wall time counts them all.
// `cpu_share` (CPU / wall over all loops) says how busy the machine was; run.sh warns when low.
//
// Not done here: pinning threads, disabling frequency scaling, or statistics beyond min/median/max.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

namespace bench {

// The thread count a libtorch benchmark sets with at::set_num_threads: MT_BENCH_THREADS (bench/threads.sh
// runs 1 and 2), else 1. minitrain's benchmarks take theirs from MT_NUM_THREADS (tensor/parallel.h).
inline int torch_threads() {
  const char* env = std::getenv("MT_BENCH_THREADS");
  const int n = env ? std::atoi(env) : 1;
  return n >= 1 ? n : 1;
}

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;  // wall seconds per call
  double cpu_median_s = 0;                     // CPU seconds of this thread per call
  int64_t iters = 0;                           // calls per repetition
  int reps = 0;
};

constexpr double kWarmupSeconds = 0.2;

// Seconds of CPU time this thread has used.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Totals over every timed loop of the program, for `cpu_share`.
inline double total_wall_s = 0, total_cpu_s = 0;

template <typename F>
Timing time_per_call(F&& fn, double rep_seconds = 0.25, int reps = 7) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  int64_t warm = 0;
  const auto w0 = Clock::now();
  while (warm < 3 || seconds_since(w0) < kWarmupSeconds) {
    fn();
    ++warm;
  }
  const double estimate = seconds_since(w0) / static_cast<double>(warm);

  Timing t;
  t.iters = std::max<int64_t>(1, static_cast<int64_t>(rep_seconds / estimate));
  t.reps = reps;
  std::vector<double> per_call, cpu_per_call;
  for (int r = 0; r < reps; ++r) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < t.iters; ++i) fn();
    const double wall = seconds_since(t0), cpu = thread_cpu_seconds() - c0;
    per_call.push_back(wall / static_cast<double>(t.iters));
    cpu_per_call.push_back(cpu / static_cast<double>(t.iters));
    total_wall_s += wall;
    total_cpu_s += cpu;
  }
  std::sort(per_call.begin(), per_call.end());
  std::sort(cpu_per_call.begin(), cpu_per_call.end());
  t.median_s = per_call[per_call.size() / 2];
  t.min_s = per_call.front();
  t.max_s = per_call.back();
  t.cpu_median_s = cpu_per_call[cpu_per_call.size() / 2];
  return t;
}

// Machine-readable results on stdout, joined by bench/run.sh: the wall-clock figure as
// "minitrain tiny_add_us 0.123" and the CPU-time one as "minitrain tiny_add_us:cpu 0.121".
// `value` turns seconds per call into the metric (micros, or a rate such as GFLOP/s). The spread
// of the repetitions goes to stderr.
template <typename V>
void report(const char* impl, const char* metric, V&& value, const Timing& t) {
  std::printf("%s %s %.4g\n%s %s:cpu %.4g\n", impl, metric, value(t.median_s), impl, metric,
              value(t.cpu_median_s));
  std::fflush(stdout);
  std::fprintf(stderr, "# %-9s %-16s %9.4g (cpu %9.4g)   wall per call: median %.4g us, min %.4g, "
               "max %.4g; %d reps x %lld\n", impl, metric, value(t.median_s), value(t.cpu_median_s),
               t.median_s * 1e6, t.min_s * 1e6, t.max_s * 1e6, t.reps, static_cast<long long>(t.iters));
}
inline double micros(double seconds) { return seconds * 1e6; }

// The share of wall time this thread spent on a CPU over all timed loops (1 = machine was idle).
inline void report_cpu_share(const char* impl) {
  std::printf("%s cpu_share %.3f\n", impl, total_wall_s > 0 ? total_cpu_s / total_wall_s : 0.0);
}

}  // namespace bench
