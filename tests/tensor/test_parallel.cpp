// The intra-op thread pool (tensor/parallel.h): parallel_for's chunks, that several threads really
// run them, errors reaching the caller, nested calls, the thread count's and the idle spin's parsing
// and errors, and the spin's bound.
// Results not depending on the count are tests/nn/test_thread_independence.cpp.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tensor/check.h"
#include "tensor/parallel.h"

using namespace mt;

namespace {

// The (begin, end) pairs parallel_for hands out, sorted.
std::vector<std::pair<int64_t, int64_t>> chunks_of(int64_t n, int64_t grain) {
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> got;
  parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
    std::lock_guard lock(m);
    got.emplace_back(lo, hi);
  });
  std::sort(got.begin(), got.end());
  return got;
}

}  // namespace

TEST_CASE("parallel_for hands out the same fixed chunks for every thread count") {
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 4}, {4, 8}, {8, 10}};
  for (int threads : {1, 2, 3}) {
    NumThreadsGuard guard(threads);
    CAPTURE(threads);
    CHECK(chunks_of(10, 4) == want);
    CHECK(chunks_of(3, 4) == std::vector<std::pair<int64_t, int64_t>>{{0, 3}});  // one call, no pool
    CHECK(chunks_of(0, 4).empty());
  }
}

TEST_CASE("with 3 threads, three chunks run at the same time") {
  NumThreadsGuard guard(3);
  // Each chunk waits until all three have started: only three threads at once can pass.
  std::atomic<int> started{0};
  std::atomic<bool> all_met{true};
  parallel_for(3, 1, [&](int64_t, int64_t) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (started.load() < 3) all_met = false;
  });
  CHECK(all_met.load());
}

TEST_CASE("an exception in a chunk reaches the caller, and nested parallel_for runs on the calling thread") {
  NumThreadsGuard guard(2);
  CHECK_THROWS_WITH_AS(parallel_for(100, 1, [](int64_t lo, int64_t) { MT_CHECK(lo != 57, "chunk ", lo, " failed"); }),
                       doctest::Contains("chunk 57 failed"), Error);
  std::atomic<int64_t> total{0};
  parallel_for(8, 1, [&](int64_t, int64_t) {
    parallel_for(10, 2, [&](int64_t lo, int64_t hi) { total += hi - lo; });
  });
  CHECK(total.load() == 80);
  CHECK_THROWS_WITH_AS(parallel_for(4, 1, [](int64_t, int64_t) { set_num_threads(1); }),
                       doctest::Contains("called from inside a parallel_for chunk"), Error);
  std::atomic<int64_t> after{0};  // the pool still works after both
  parallel_for(1000, 10, [&](int64_t lo, int64_t hi) { after += hi - lo; });
  CHECK(after.load() == 1000);
}

TEST_CASE("the thread count: set/get, MT_NUM_THREADS, and one-line errors") {
  {
    NumThreadsGuard guard(5);
    CHECK(get_num_threads() == 5);
  }
  CHECK_THROWS_WITH_AS(set_num_threads(0), doctest::Contains("thread count must be in 1..1024, got 0"), Error);
  CHECK(detail::parse_num_threads("4", "MT_NUM_THREADS") == 4);
  for (const char* bad : {"0", "-2", "two", "3x", "", "1025", "99999999999999999999"}) {
    CAPTURE(bad);
    const std::string want = std::string("--threads must be a whole number of threads in 1..1024, got '") + bad + "'";
    CHECK_THROWS_WITH_AS(detail::parse_num_threads(bad, "--threads"), doctest::Contains(want.c_str()), Error);
  }
  const char* old = std::getenv("MT_NUM_THREADS");
  const std::string saved = old ? old : "";
  setenv("MT_NUM_THREADS", "3", 1);
  CHECK(default_num_threads() == 3);
  setenv("MT_NUM_THREADS", "many", 1);
  CHECK_THROWS_WITH_AS(default_num_threads(), doctest::Contains("MT_NUM_THREADS must be a whole number"), Error);
  // Without it: the usable cores shared by the ranks of this machine (LOCAL_WORLD_SIZE and the
  // launchers' own counts), at least 1.
  unsetenv("MT_NUM_THREADS");
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const std::string saved_local = local ? local : "";
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  const int all = default_num_threads();
  CHECK(all >= 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  CHECK(default_num_threads() == std::max(1, all / 2));
  setenv("LOCAL_WORLD_SIZE", "100000", 1);
  CHECK(default_num_threads() == 1);
  // The MPI launchers' and srun's own counts, when LOCAL_WORLD_SIZE is not set (it wins when it is).
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    CAPTURE(name);
    const char* had = std::getenv(name);
    const std::string saved_launcher = had ? had : "";
    setenv(name, "100000", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    CHECK(default_num_threads() == all);
    unsetenv("LOCAL_WORLD_SIZE");
    CHECK(default_num_threads() == 1);
    setenv(name, "2", 1);
    CHECK(default_num_threads() == std::max(1, all / 2));
    unsetenv(name);
    CHECK(default_num_threads() == all);  // no launcher's count at all: every usable core
    if (had) setenv(name, saved_launcher.c_str(), 1);
  }
  if (local) setenv("LOCAL_WORLD_SIZE", saved_local.c_str(), 1); else unsetenv("LOCAL_WORLD_SIZE");
  if (old) setenv("MT_NUM_THREADS", saved.c_str(), 1);
}

TEST_CASE("the idle spin: MT_SPIN_US, OMP_WAIT_POLICY, one-line errors, and a bound") {
  CHECK(detail::parse_spin_us(nullptr, nullptr) == 50);
  CHECK(detail::parse_spin_us(nullptr, "passive") == 0);
  CHECK(detail::parse_spin_us(nullptr, "PASSIVE") == 0);
  CHECK(detail::parse_spin_us(nullptr, "active") == 50);
  CHECK(detail::parse_spin_us("0", "active") == 0);
  CHECK(detail::parse_spin_us("200", "passive") == 200);  // the explicit setting wins
  for (const char* bad : {"-1", "fast", "5us", "", "1000001"}) {
    CAPTURE(bad);
    const std::string want = std::string("MT_SPIN_US must be a whole number of microseconds in 0..1000000, got '") + bad + "'";
    CHECK_THROWS_WITH_AS(detail::parse_spin_us(bad, nullptr), doctest::Contains(want.c_str()), Error);
  }
  // Note [Spin, then sleep]: the spin is bounded, so an idle pool costs no CPU. Spinning forever
  // would burn a whole core through the 300 ms below; the spin itself is at most a millisecond.
  NumThreadsGuard guard(2);
  std::atomic<int64_t> sum{0};
  parallel_for(1000, 10, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
  CHECK(sum.load() == 1000);
  const auto cpu_seconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin of the job above
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(cpu_seconds() - before < 0.1);
}
