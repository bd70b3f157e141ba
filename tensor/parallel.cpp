// The intra-op thread pool behind parallel_for (tensor/parallel.h), and the thread count.
//
// One pool per process, made on first use: N - 1 worker threads that sleep on a condition
// variable until a job is posted. A job is a number of chunks and a function; the caller and the
// workers take chunk indices from the job's atomic counter until none are left, and the caller
// returns when every chunk has finished. Each job is its own shared object, so a worker that
// wakes late (the machine is busy) and finds its job finished touches only that job's counter,
// never the next job's chunks or the finished caller's stack.
//
// Deliberately small: no work stealing, no task graph, no priorities; one job at a time (a second
// thread calling parallel_for meanwhile runs its chunks itself).
//
// Note [A pool, not OpenMP]: not chosen by a head-to-head measurement (none was made). The pool was
// preferred because (1) its idle workers sleep on a condition variable, where libgomp's spin
// (GOMP_SPINCOUNT) would take cycles from the other processes of a shared machine and from the
// other ranks of an --nproc job; (2) a second thread calling in (a DataLoader worker, a user's own
// thread) runs its chunks serially instead of starting another team of threads, so the process
// never runs more than N compute threads; (3) the library needs no OpenMP runtime, and a child made
// by fork() gets a fresh pool (below). Measured here: an uncontended parallel_for whose chunks the
// caller finishes first costs ~0.1-0.2 µs over a plain call (bench/README.md, "Threads").
#include "tensor/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tensor/check.h"

#ifdef MT_HAVE_BLAS
#include <cblas.h>
#endif

namespace mt {
namespace {

struct Job {
  void (*task)(void*, int64_t);
  void* ctx;
  int64_t chunks;
  std::atomic<int64_t> next{0};      // the next chunk to hand out
  std::atomic<int64_t> finished{0};  // chunks done (or skipped after an error)
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception a chunk threw
};

// Note [Spin, then sleep]: a worker that finished its chunks, and a caller waiting for the
// workers' last chunks, first spin for a short while (kDefaultSpinUs, or MT_SPIN_US), checking the
// one atomic they wait for, and only then sleep on the condition variable. Why: a training step is
// tens to hundreds of parallel regions one after another, with microseconds of serial work
// (autograd, allocation, small ops) between them. A sleeping thread costs a futex system call to
// wake, and more on a virtual machine, where an idle vCPU is halted and must be rescheduled by the
// host: measured here (KVM, 2 vCPUs), the CNN step at 2 threads without a spin spent ~7 % of its
// CPU time in the scheduler, made 240 context switches a step, and its second thread started each
// region late. A spin that outlasts the gaps between regions means the worker is already running
// when the next job is posted, and notify_all finds no waiter (no system call). The spin is
// bounded, so a process that stops posting (data loading, an all-reduce, the end of a step) goes
// back to sleeping within it and costs the machine's other processes nothing after that
// (tests/tensor/test_parallel.cpp checks the bound). MT_SPIN_US sets it (0: sleep at once), and
// without it OMP_WAIT_POLICY=passive, the variable OpenMP users know, turns it off.
// kDefaultSpinUs was measured (2 threads, medians of 9 interleaved runs, 2026-12-01): the MLP step
// (bench_core's 784-256-10, batch 128) took 0.92 / 0.86 / 0.76 / 0.75 ms with a spin of
// 0 / 10 / 50 / 200 µs, against 1.22 ms at 1 thread; the CNN step, whose convolutions already run
// whole samples per chunk (Note [Samples on the threads]), 25.1 / 24.4 / 24.2 / 23.9 ms.

// The spin (Note [Spin, then sleep]), settled with the thread count (get_num_threads), so a
// malformed MT_SPIN_US is an error in the calling thread and never reaches a worker.
constexpr int64_t kDefaultSpinUs = 50, kMaxSpinUs = 1000000;
std::atomic<int64_t> g_spin_ns{kDefaultSpinUs * 1000};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or the spin has passed; the caller then sleeps if done() is still false.
template <typename Done>
void spin_until(Done&& done) {
  const std::chrono::nanoseconds limit(g_spin_ns.load(std::memory_order_relaxed));
  if (limit.count() == 0) return;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() - start > limit) return;
  }
}

// Set in pool workers, and in a caller while it runs its share: parallel_for inside a chunk runs
// serially instead of waiting on the pool it is part of.
thread_local bool t_in_pool = false;

class ThreadPool {
 public:
  // Runs job on `workers` worker threads plus the caller. The caller holds submit_.
  void run(const std::shared_ptr<Job>& job, int workers) {
    if (static_cast<int>(threads_.size()) != workers) restart(workers);
    {
      std::lock_guard lock(mutex_);
      job_ = job;
      ++generation_;
    }
    wake_.notify_all();  // no system call when every worker is still spinning (no waiter)
    t_in_pool = true;
    work(*job);
    t_in_pool = false;
    spin_until([&] { return job->finished.load(std::memory_order_acquire) == job->chunks; });
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return job->finished.load() == job->chunks; });
    job_.reset();  // the job's ctx lives on the caller's stack: nobody may start on it now
  }

  void restart(int workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      ++generation_;  // a spinning worker goes to the lock at once, and sees stop_
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
  }

  std::mutex submit_;  // held by the one caller whose job the pool runs
  // After fork() the child has none of these threads; it gets a fresh pool, and this one stays
  // reachable (never destroyed: its threads and locks belong to the parent).
  ThreadPool* before_fork_ = nullptr;

 private:
  void work(Job& job) {
    for (;;) {
      const int64_t c = job.next.fetch_add(1);
      if (c >= job.chunks) return;
      if (!job.failed.load()) {
        try {
          job.task(job.ctx, c);
        } catch (...) {
          std::lock_guard lock(job.error_mutex);
          if (!job.error) job.error = std::current_exception();
          job.failed = true;
        }
      }
      if (job.finished.fetch_add(1) + 1 == job.chunks) {
        std::lock_guard lock(mutex_);  // so the caller cannot miss the wake-up between test and wait
        done_.notify_all();
      }
    }
  }

  void worker() {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      if (job) work(*job);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};  // written under mutex_; read without it while spinning
  bool stop_ = false;
};

ThreadPool* g_pool = nullptr;
std::once_flag g_pool_once;

ThreadPool& pool() {
  std::call_once(g_pool_once, [] {
    g_pool = new ThreadPool;
    pthread_atfork(nullptr, nullptr, [] {
      auto* fresh = new ThreadPool;
      fresh->before_fork_ = g_pool;
      g_pool = fresh;
    });
  });
  return *g_pool;
}

std::atomic<int> g_threads{0};  // 0: not settled yet
std::mutex g_threads_mutex;

// OpenBLAS stays on one thread whatever the count: GEMMs are split on this pool instead
// (Note [GEMM on the pool], tensor/cpu/cpu_gemm.cpp).
void settle_blas_threads() {
#ifdef MT_HAVE_BLAS
  openblas_set_num_threads(1);
#endif
}

// The spin from MT_SPIN_US / OMP_WAIT_POLICY, once, with the thread count (g_threads_mutex held):
// throws on a malformed MT_SPIN_US, in the thread that settles the count.
void settle_spin() {
  g_spin_ns = detail::parse_spin_us(std::getenv("MT_SPIN_US"), std::getenv("OMP_WAIT_POLICY")) * 1000;
}

// The CPUs this process may run on (taskset, cgroups' cpusets), else the hardware's count.
int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

namespace detail {

namespace {
// text as a whole number in [lo, hi], or nullopt (empty, trailing characters, out of range).
std::optional<long long> whole_number_in(const char* text, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) return std::nullopt;
  return v;
}
}  // namespace

int parse_num_threads(const std::string& text, const char* source) {
  const std::optional<long long> v = whole_number_in(text.c_str(), 1, kMaxThreads);
  MT_CHECK(v.has_value(), source, " must be a whole number of threads in 1..", kMaxThreads, ", got '", text, "'");
  return static_cast<int>(*v);
}

int64_t parse_spin_us(const char* spin_us, const char* omp_wait_policy) {
  if (spin_us) {
    const std::optional<long long> v = whole_number_in(spin_us, 0, kMaxSpinUs);
    MT_CHECK(v.has_value(), "MT_SPIN_US must be a whole number of microseconds in 0..", kMaxSpinUs, ", got '",
             spin_us, "'");
    return *v;
  }
  const std::string policy = omp_wait_policy ? omp_wait_policy : "";
  return policy == "passive" || policy == "PASSIVE" ? 0 : kDefaultSpinUs;
}

void run_chunks(int64_t chunks, void (*task)(void*, int64_t), void* ctx) {
  const int threads = get_num_threads();
  if (threads > 1 && chunks > 1 && !t_in_pool) {
    ThreadPool& p = pool();
    std::unique_lock submit(p.submit_, std::try_to_lock);
    if (submit) {
      auto job = std::make_shared<Job>();
      job->task = task, job->ctx = ctx, job->chunks = chunks;
      p.run(job, threads - 1);
      if (job->error) std::rethrow_exception(job->error);
      return;
    }
  }
  for (int64_t c = 0; c < chunks; ++c) task(ctx, c);  // the same chunks, in order, on this thread
}

}  // namespace detail

int default_num_threads() {
  if (const char* env = std::getenv("MT_NUM_THREADS")) return detail::parse_num_threads(env, "MT_NUM_THREADS");
  // The ranks on this machine, from whichever launcher started this process: mini_train's and
  // torchrun (LOCAL_WORLD_SIZE), OpenMPI's mpirun, MPICH's and Intel's mpiexec, srun with
  // --ntasks-per-node. The launchers' own variables: rendezvous validates them (distributed/).
  int local_ranks = 1;
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* env = std::getenv(name);
    const long v = env ? std::strtol(env, nullptr, 10) : 0;
    if (v >= 1) {
      local_ranks = static_cast<int>(v);
      break;
    }
  }
  const int cpus = usable_cpus();
  return cpus / local_ranks >= 1 ? cpus / local_ranks : 1;
}

int get_num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  std::lock_guard lock(g_threads_mutex);
  if (g_threads.load() == 0) {
    const int settled = default_num_threads();  // throws on a malformed MT_NUM_THREADS
    settle_spin();
    settle_blas_threads();
    g_threads = settled;
  }
  return g_threads.load();
}

int64_t thread_spin_us() {
  get_num_threads();  // settles the spin too
  return g_spin_ns.load(std::memory_order_relaxed) / 1000;
}

void set_num_threads(int n) {
  MT_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: the thread count must be in 1..", kMaxThreads,
           ", got ", n);
  // The pool's submit lock is held by the parallel_for this chunk belongs to: waiting for it here
  // would never end.
  MT_CHECK(!t_in_pool, "set_num_threads: called from inside a parallel_for chunk; change the count outside it");
  std::lock_guard lock(g_threads_mutex);
  if (g_threads.load() == 0) settle_spin();  // a count set before any was read: the spin still settles
  std::lock_guard submit(pool().submit_);  // no job is running while the count changes
  settle_blas_threads();
  g_threads = n;
}

}  // namespace mt
