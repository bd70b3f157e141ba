// bench_parallel: where a second thread starts to pay, the measurement behind the grains of
// tensor/cpu/cpu_backend.h. For n elements it times one loop over them as a single chunk and as two
// chunks of parallel_for at 2 threads (tensor/parallel.h), for a cheap op (add: 8 bytes read, 4
// written per element) and a costly one (exp). Output: one line per n, medians of 15 repetitions of
// 200 calls, wall clock in µs (the point is what the second thread saves, so thread CPU time would
// not do). Run on an idle machine for figures worth keeping: on a loaded one the second thread
// waits for a core, and the crossover moves with the load.
//   build-bench/bench/bench_parallel
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "minitrain.h"

namespace {

template <typename F>
double median_us(F f) {
  std::vector<double> t;
  for (int r = 0; r < 15; ++r) {
    constexpr int kIters = 200;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kIters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  mt::set_num_threads(2);
  std::vector<float> x(1 << 20, 1.0f), y(1 << 20, 2.0f), o(1 << 20);
  float* po = o.data();
  const float* px = x.data();
  const float* py = y.data();
  std::printf("# n, then µs for: add as 1 chunk, add as 2 chunks, exp as 1 chunk, exp as 2 chunks\n");
  for (int64_t n : {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144}) {
    const auto add = [&](int64_t grain) {
      return median_us([&] {
        mt::parallel_for(n, grain, [=](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) po[i] = px[i] + py[i];
        });
      });
    };
    const auto exp = [&](int64_t grain) {
      return median_us([&] {
        mt::parallel_for(n, grain, [=](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) po[i] = std::exp(px[i]);
        });
      });
    };
    std::printf("%8ld %10.2f %10.2f %10.2f %10.2f\n", static_cast<long>(n), add(n), add(n / 2), exp(n), exp(n / 2));
  }
  return 0;
}
