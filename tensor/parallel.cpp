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
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
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
    wake_.notify_all();
    t_in_pool = true;
    work(*job);
    t_in_pool = false;
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return job->finished.load() == job->chunks; });
    job_.reset();  // the job's ctx lives on the caller's stack: nobody may start on it now
  }

  void restart(int workers) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
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
  uint64_t generation_ = 0;
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

// The CPUs this process may run on (taskset, cgroups' cpusets), else the hardware's count.
int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

namespace detail {

int parse_num_threads(const std::string& text, const char* source) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  MT_CHECK(!text.empty() && *end == '\0' && errno == 0 && v >= 1 && v <= kMaxThreads, source,
           " must be a whole number of threads in 1..", kMaxThreads, ", got '", text, "'");
  return static_cast<int>(v);
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
  int local_ranks = 1;
  if (const char* env = std::getenv("LOCAL_WORLD_SIZE")) {
    const long v = std::strtol(env, nullptr, 10);  // the launcher's own variable: validated by rendezvous
    if (v >= 1) local_ranks = static_cast<int>(v);
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
    settle_blas_threads();
    g_threads = settled;
  }
  return g_threads.load();
}

void set_num_threads(int n) {
  MT_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: the thread count must be in 1..", kMaxThreads,
           ", got ", n);
  // The pool's submit lock is held by the parallel_for this chunk belongs to: waiting for it here
  // would never end.
  MT_CHECK(!t_in_pool, "set_num_threads: called from inside a parallel_for chunk; change the count outside it");
  std::lock_guard lock(g_threads_mutex);
  std::lock_guard submit(pool().submit_);  // no job is running while the count changes
  settle_blas_threads();
  g_threads = n;
}

}  // namespace mt
