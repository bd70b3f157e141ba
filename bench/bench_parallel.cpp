// bench_parallel: where a second thread starts to pay, the measurement behind the grains of
// tensor/cpu/cpu_backend.h. For n elements it times one loop over them as a single chunk and as two
// chunks of parallel_for at 2 threads (tensor/parallel.h), for a cheap op (add: 8 bytes read, 4
// written per element) and a costly one (exp). Output: one line per n, medians of 15 repetitions of
// 200 calls, wall clock in µs (the point is what the second thread saves, so thread CPU time would
// not do). Run on an idle machine for figures worth keeping: on a loaded one the second thread
// waits for a core, and the crossover moves with the load.
// Then whole kernels at 1 and 2 threads, at the sizes the CNN and GPT steps give them (strided
// reductions, the embedding's lookup and backward, max pooling's backward, bias gradients, the Adam
// step, the Winograd convolution, the fused BatchNorm + ReLU + pool): rounds of 1 then 2 threads,
// interleaved, each the median of 5 repetitions; the table has each count's median over the rounds,
// the median of the rounds' 1-thread / 2-thread ratios, and the calling thread's CPU time at 2
// threads over that at 1 (about 0.5 when the worker ran half the chunks, 1 when it got no core in
// time: a second reading of the load). The load average is printed before and after.
// First of all, the pool's hand-off cost (handoff below).
//   build-bench/bench/bench_parallel            # all three parts
//   build-bench/bench/bench_parallel kernels    # the kernels only (grains: the chunks only; handoff: the hand-off only)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tensor/raw_batch_norm.h"
#include "tensor/raw_ops.h"

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

// Seconds of CPU time the calling thread has used.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Per call of f, over 5 repetitions of `calls` calls: the median wall ms, and the calling thread's
// CPU ms over all of them (with 2 threads, what the worker took off it shows as less).
struct Time {
  double wall_ms, caller_cpu_ms;
};
Time time_calls(const std::function<void()>& f, int calls) {
  std::vector<double> t;
  const double cpu0 = thread_cpu_s();
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], (thread_cpu_s() - cpu0) * 1e3 / (5.0 * calls)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void print_load(const char* when) {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) std::printf("# load average %s: %.2f %.2f %.2f\n", when, load[0], load[1], load[2]);
}

struct Kernel {
  const char* name;
  std::function<void()> run;
  int calls;  // per repetition
};

// The kernels at 1 and 2 threads, interleaved rounds (see the file comment).
void kernels_at_1_and_2_threads() {
  using namespace mt;
  Generator gen(1);
  const Tensor xt = transpose(randn({1024, 1024}, gen), 0, 1);  // strides (1, 1024)
  const Tensor wt = transpose(randn({256, 4096}, gen), 0, 1);   // (4096, 256), strides (1, 4096)
  const Tensor tokens = cast(mul(rand({2048}, gen), 256.0), DType::Int64);  // GPT preset: 32 x 64
  const Tensor table = randn({256, 128}, gen), rows = randn({2048, 128}, gen);
  const Tensor wide_table = randn({256, 512}, gen), wide_rows = randn({2048, 512}, gen);
  // The CNN's first max pool, backward: 64 samples x 32 planes of 28x28, a winner per 2x2 window.
  const Tensor winners = cast(mul(rand({64 * 32, 196}, gen), 784.0), DType::Int64);
  const Tensor pooled = randn({64 * 32, 196}, gen);
  // The CNN's second convolution (32 -> 64, 14x14, batch 64): Winograd.
  const Tensor x = randn({64, 32, 14, 14}, gen), w = randn({64, 32, 3, 3}, gen), b = randn({64}, gen);
  const Tensor dy = randn({64, 64, 14, 14}, gen);
  const Conv2dOptions pad1{.padding = 1};
  // The CNN's first BatchNorm2d -> ReLU -> MaxPool2d(2), fused (Note [Fused batch norm, ReLU and pool]).
  const Tensor act = randn({64, 32, 28, 28}, gen), ones32 = ones({32}), zeros32 = zeros({32});
  const std::optional<Pool2dOptions> pool2 = Pool2dOptions{.kernel_size = 2};
  const raw::BatchNormMoments moments = raw::batch_norm_stats(act);
  const raw::BatchNormReluResult fused = raw::batch_norm_relu(act, moments.mean, ones32, zeros32, pool2);
  const Tensor dpooled = randn({64, 32, 14, 14}, gen);
  // Bias gradients. Linear's, db = sum of dy over rows: the GPT preset's dy of 32 x 64 rows, one
  // (2048, 128) alone, then all 16 of a step (4 blocks: qkv 384, proj 128, fc1 512, fc2 128 outputs).
  // The CNN's two convolutions', db = sum of dy over (N, H, W).
  const Tensor dy_128 = randn({2048, 128}, gen);
  std::vector<Tensor> gpt_dys;
  for (int block = 0; block < 4; ++block)
    for (int64_t out : {384, 128, 512, 128}) gpt_dys.push_back(randn({2048, out}, gen));
  const Tensor conv1_dy = randn({64, 32, 28, 28}, gen), conv2_dy = randn({64, 64, 14, 14}, gen);
  // Adam on the CNN preset's parameters (random gradients; the step count grows, which changes no cost).
  std::vector<Tensor> cnn_params;
  for (const Shape& s : {Shape{32, 1, 3, 3}, Shape{32}, Shape{32}, Shape{32}, Shape{64, 32, 3, 3}, Shape{64}, Shape{64},
                         Shape{64}, Shape{128, 3136}, Shape{128}, Shape{10, 128}, Shape{10}}) {
    cnn_params.push_back(randn(s, gen).requires_grad_());
    cnn_params.back().set_grad(randn(s, gen));
  }
  optim::Adam adam(cnn_params, {.lr = 1e-3});
  const auto bn_relu_pool_forward = [&] {
    const raw::BatchNormMoments m = raw::batch_norm_stats(act);
    raw::batch_norm_relu(act, m.mean, ones32, zeros32, pool2);
  };
  const auto bn_relu_pool_backward = [&] {
    raw::batch_norm_relu_backward(dpooled, fused.out, fused.indices, act, moments.mean, ones32, ones32, pool2, true);
  };
  const std::vector<Kernel> kernels = {
      {"sum(dim 0) of a transposed 1024x1024", [&] { sum(xt, {0}); }, 50},
      {"sum of all of a transposed 1024x1024", [&] { sum(xt); }, 50},
      {"sum(dim 1) of a transposed 256x4096", [&] { sum(wt, {1}); }, 50},
      {"embedding lookup, 2048 x 128 of 256", [&] { raw::index_select(table, 0, tokens); }, 200},
      {"embedding backward (index_add), dim 128", [&] { raw::index_add_zeros(table.sizes(), 0, tokens, rows); }, 200},
      {"embedding backward (index_add), dim 512",
       [&] { raw::index_add_zeros(wide_table.sizes(), 0, tokens, wide_rows); }, 100},
      {"max pool backward (scatter_add)", [&] { raw::scatter_add_zeros(Shape{64 * 32, 784}, 1, winners, pooled); }, 20},
      {"bias gradient, sum(dim 0) of 2048x128", [&] { sum(dy_128, {0}); }, 100},
      {"the GPT step's 16 Linear bias gradients",
       [&] {
         for (const Tensor& dy : gpt_dys) sum(dy, {0});
       },
       10},
      {"the CNN step's 2 conv bias gradients",
       [&] {
         sum(conv1_dy, {0, 2, 3});
         sum(conv2_dy, {0, 2, 3});
       },
       20},
      {"Adam step, the CNN preset's parameters", [&] { adam.step(); }, 50},
      {"Winograd conv 32->64 14x14 b64, forward", [&] { raw::conv2d_winograd(x, w, b, pad1); }, 5},
      {"Winograd conv, input gradient", [&] { raw::conv2d_input_grad_winograd(dy, w, pad1); }, 5},
      {"Winograd conv, weight gradient", [&] { raw::conv2d_weight_grad_winograd(dy, x, w, pad1); }, 5},
      {"BN+ReLU+pool 64x32x28x28, forward", [&] { bn_relu_pool_forward(); }, 20},
      {"BN+ReLU+pool 64x32x28x28, backward", [&] { bn_relu_pool_backward(); }, 20},
  };
  constexpr int kRounds = 5;
  const size_t n = kernels.size();
  std::vector<std::vector<double>> one(n), two(n), ratio(n), caller(n);
  print_load("before");
  for (int round = 0; round < kRounds; ++round)
    for (size_t k = 0; k < n; ++k) {
      set_num_threads(1);
      kernels[k].run();  // warm: allocator bins, caches
      const Time a = time_calls(kernels[k].run, kernels[k].calls);
      set_num_threads(2);
      kernels[k].run();
      const Time b = time_calls(kernels[k].run, kernels[k].calls);
      one[k].push_back(a.wall_ms);
      two[k].push_back(b.wall_ms);
      ratio[k].push_back(a.wall_ms / b.wall_ms);
      caller[k].push_back(b.caller_cpu_ms / a.caller_cpu_ms);
    }
  print_load("after");
  std::printf("# kernel | wall ms at 1 thread | at 2 | 1 / 2 | the caller's CPU time at 2 / at 1 (medians of %d "
              "rounds)\n", kRounds);
  for (size_t k = 0; k < n; ++k)
    std::printf("%-42s %9.3f %9.3f %6.2fx %6.2f\n", kernels[k].name, median(one[k]), median(two[k]), median(ratio[k]),
                median(caller[k]));
}

void grains() {
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
}

// The pool's hand-off: how long after parallel_for is called the worker starts its chunk, at 2
// threads, when it is still spinning from the call before (back to back: the steady state of a
// training step's regions), 20 µs later, and 2 ms later, when it has gone to sleep (past the spin of
// Note [Spin, then sleep], so a futex wake, and on a VM a halted vCPU). Two chunks: the caller takes
// the first and waits in it until the worker has taken the second (at most 10 ms), so the time is
// the hand-off itself. The caller busy-waits through the gap, so its own wake-up is not in it; for
// reference, two empty chunks at 1 thread. Medians of 301 calls, µs.
void handoff() {
  using clock = std::chrono::steady_clock;
  std::printf("# the pool's hand-off at 2 threads, µs per parallel_for, median of 301; spin %ld µs\n",
              static_cast<long>(mt::thread_spin_us()));
  const auto median_call_us = [&](int threads, double gap_us) {
    mt::set_num_threads(threads);
    std::atomic<int> started{0};
    const auto both_chunks = [&](int64_t, int64_t) {  // at 1 thread: no waiting, the chunks run in turn
      started.fetch_add(1);
      const auto give_up = clock::now() + std::chrono::milliseconds(10);
      while (threads > 1 && started.load() < 2 && clock::now() < give_up) {
      }
    };
    mt::parallel_for(2, 1, both_chunks);  // the pool exists, its worker started
    std::vector<double> t;
    for (int i = 0; i < 301; ++i) {
      const auto resume = clock::now() + std::chrono::duration<double, std::micro>(gap_us);
      while (clock::now() < resume) {
      }
      started = 0;
      const auto start = clock::now();
      mt::parallel_for(2, 1, both_chunks);
      t.push_back(std::chrono::duration<double, std::micro>(clock::now() - start).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::printf("%-44s %8.2f\n", "1 thread, two empty chunks", median_call_us(1, 0));
  std::printf("%-44s %8.2f\n", "2 threads, back to back (worker spinning)", median_call_us(2, 0));
  std::printf("%-44s %8.2f\n", "2 threads, 20 us apart", median_call_us(2, 20));
  std::printf("%-44s %8.2f\n", "2 threads, 2000 us apart (worker asleep)", median_call_us(2, 2000));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string part = argc > 1 ? argv[1] : "";
  if (part != "" && part != "grains" && part != "kernels" && part != "handoff") {
    std::fprintf(stderr, "usage: bench_parallel [grains|kernels|handoff]\n");
    return 2;
  }
  if (part == "" || part == "handoff") handoff();
  if (part == "" || part == "grains") grains();
  if (part == "" || part == "kernels") kernels_at_1_and_2_threads();
  return 0;
}
