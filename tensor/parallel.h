// Intra-op parallelism on the CPU: how many threads one process uses, and parallel_for, the one
// loop the CPU kernels (tensor/cpu/), the optimizers' fused updates and anything else above them
// split across those threads. Behind it is one small pool of worker threads per process
// (tensor/parallel.cpp); the thread that calls parallel_for works too, so N threads = N - 1 workers.
// GEMM runs on it too, as fixed blocks of single-threaded Eigen or OpenBLAS calls (Note [GEMM on the pool],
// tensor/cpu/cpu_gemm.cpp): one pool, and no second set of threads competing for the cores.
//
// The count, first match wins: set_num_threads(n) (mini_train --threads n); the MT_NUM_THREADS
// environment variable; usable CPUs / the ranks this machine runs (LOCAL_WORLD_SIZE from
// mini_train's launcher and torchrun, else OMPI_COMM_WORLD_LOCAL_SIZE from mpirun, MPI_LOCALNRANKS
// from mpiexec, SLURM_NTASKS_PER_NODE from srun), at least 1.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace mt {

constexpr int kMaxThreads = 1024;

// The threads CPU kernels use (>= 1). The first call settles the default from the environment and
// throws an mt::Error naming MT_NUM_THREADS when that is malformed.
int get_num_threads();
// n in 1..kMaxThreads. Waits for a running parallel_for. (OpenBLAS is kept at 1 thread.)
void set_num_threads(int n);
// What get_num_threads() starts from when set_num_threads was never called (see the file comment).
int default_num_threads();
// How long an idle pool thread spins before it sleeps, in µs (Note [Spin, then sleep],
// tensor/parallel.cpp): MT_SPIN_US, else 0 under OMP_WAIT_POLICY=passive, else 50. Settled with the
// thread count; a malformed MT_SPIN_US throws an mt::Error naming it.
int64_t thread_spin_us();

// Sets the thread count for a scope and restores the previous one at its end.
class NumThreadsGuard {
 public:
  explicit NumThreadsGuard(int n) : previous_(get_num_threads()) { set_num_threads(n); }
  ~NumThreadsGuard() { set_num_threads(previous_); }
  NumThreadsGuard(const NumThreadsGuard&) = delete;
  NumThreadsGuard& operator=(const NumThreadsGuard&) = delete;

 private:
  int previous_;
};

namespace detail {
// "4" -> 4. Anything but a whole number in 1..kMaxThreads is an mt::Error of one line naming
// `source` (e.g. "MT_NUM_THREADS" or "--threads") and the text.
int parse_num_threads(const std::string& text, const char* source);

// The spin in µs from MT_SPIN_US's and OMP_WAIT_POLICY's values (null: unset); a malformed
// MT_SPIN_US is an mt::Error of one line naming it.
int64_t parse_spin_us(const char* spin_us, const char* omp_wait_policy);

// Runs task(ctx, c) for every chunk c in [0, chunks), on the pool and the calling thread.
void run_chunks(int64_t chunks, void (*task)(void*, int64_t), void* ctx);
}  // namespace detail

// Note [Fixed chunks]: parallel_for(n, grain, f) calls f(begin, end) on the chunks
// [0, grain), [grain, 2·grain), ... of [0, n) — the same chunks for every thread count, including
// 1 (n <= grain is one call f(0, n)). Only which thread runs a chunk depends on the count. So a
// kernel whose chunk results depend only on the chunk's own range (every elementwise op; a
// reduction that combines per-chunk partial results in chunk order afterwards) gives the same bits
// with 1, 2 or 64 threads, and even a loop that is vectorised differently at a chunk's edges
// (peeled heads, scalar tails) splits at the same places every time. grain is measured per kernel
// (bench/README.md, "Threads"); it is the size below which a second thread costs more than it saves.
// Exceptions thrown by f reach the caller (the first one, once every chunk has stopped).
// Nested calls (f calling parallel_for) and calls while another thread's parallel_for holds the pool
// run their chunks on the calling thread, in order.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain) {  // the tiny-tensor path: no pool, no atomics, one call
    f(int64_t{0}, n);
    return;
  }
  const int64_t chunks = (n + grain - 1) / grain;
  struct Ctx {
    std::remove_reference_t<F>* f;
    int64_t n, grain;
  } ctx{&f, n, grain};
  detail::run_chunks(
      chunks,
      [](void* p, int64_t c) {
        auto& x = *static_cast<Ctx*>(p);
        const int64_t begin = c * x.grain;
        (*x.f)(begin, begin + x.grain < x.n ? begin + x.grain : x.n);
      },
      &ctx);
}

}  // namespace mt
