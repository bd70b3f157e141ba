// bench_gemm_floor: what OpenBLAS alone allows the steps of bench/steps.sh: cblas_sgemm called
// directly on every matrix product of the GPT preset's step and of the CNN's step (bench/step_products.h:
// the shapes, transposes and counts, forward and backward), and on a 1024×1024 product, the GEMM's
// peak on this machine. It runs at the thread count OpenBLAS reads from OPENBLAS_NUM_THREADS (steps.sh
// sets 1 and 2). Output, `<impl> <metric> <value>` lines (bench/timing.h):
//   openblas gemm1024_gflops        C = A·B, 1024×1024 float32
//   openblas gpt_products_ms        all the GPT step's products, one after the other, and as a rate:
//   openblas gpt_products_gflops    its flops over that time
//   openblas cnn_products_ms        the same for the CNN step
//   openblas cnn_products_gflops
//   flops gpt_step_gflop            the flops a GPT step is credited with (step_products.h says how)
//   flops cnn_step_gflop            the same for the CNN step
// Each product's `count` calls walk distinct slices of three buffers, as a step walks its
// activations, so the caches see about what they see in the step. The values are not checked: the
// products' inputs are constants and nothing reads the results.
// Without OpenBLAS at configure time (bench/CMakeLists.txt) it prints only the flops lines.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "bench/step_products.h"
#include "bench/timing.h"

#ifdef MT_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace {

#ifdef MT_BENCH_OPENBLAS
// Buffers big enough for any product's A, B and C slices, all `count` of them.
struct Buffers {
  std::vector<float> a, b, c;
  explicit Buffers(const std::vector<bench::Product>& products) {
    size_t na = 0, nb = 0, nc = 0;
    for (const bench::Product& p : products) {
      na = std::max<size_t>(na, static_cast<size_t>(p.m * p.k * p.count));
      nb = std::max<size_t>(nb, static_cast<size_t>(p.k * p.n * p.count));
      nc = std::max<size_t>(nc, static_cast<size_t>(p.m * p.n * p.count));
    }
    a.assign(na, 0.01f), b.assign(nb, 0.02f), c.assign(nc, 0.0f);
  }
};

// Every product of the list once: what the step's GEMMs cost with nothing around them.
void run_products(const std::vector<bench::Product>& products, Buffers& buf) {
  for (const bench::Product& p : products) {
    const int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
    for (int64_t i = 0; i < p.count; ++i) {
      cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans,
                  static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1.0f,
                  buf.a.data() + i * p.m * p.k, static_cast<int>(lda), buf.b.data() + i * p.k * p.n,
                  static_cast<int>(ldb), 0.0f, buf.c.data() + i * p.m * p.n, static_cast<int>(p.n));
    }
  }
}

void bench_products(const char* name, const std::vector<bench::Product>& products) {
  Buffers buf(products);
  const double flop = bench::total_flops(products);
  const bench::Timing t = bench::time_per_call([&] { run_products(products, buf); }, 0.5, 5);
  char metric[64];
  std::snprintf(metric, sizeof metric, "%s_products_ms", name);
  bench::report("openblas", metric, [](double s) { return s * 1e3; }, t);
  std::snprintf(metric, sizeof metric, "%s_products_gflops", name);
  bench::report("openblas", metric, [flop](double s) { return flop / s * 1e-9; }, t);
}

void bench_gemm1024() {
  constexpr int kN = 1024;
  // a, b, c: (1024, 1024)
  std::vector<float> a(size_t{kN} * kN, 0.01f), b(size_t{kN} * kN, 0.02f), c(size_t{kN} * kN);
  const bench::Timing t = bench::time_per_call([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f,
                c.data(), kN);
  }, 0.25, 5);
  bench::report("openblas", "gemm1024_gflops", [](double s) { return 2.0 * kN * kN * kN / s * 1e-9; }, t);
}
#endif

}  // namespace

int main() {
  try {
    const std::vector<bench::Product> gpt = bench::gpt_step_products(), cnn = bench::cnn_step_products();
    std::printf("flops gpt_step_gflop %.4g\nflops cnn_step_gflop %.4g\n", bench::total_flops(gpt) * 1e-9,
                bench::total_flops(cnn) * 1e-9);
    std::fflush(stdout);
#ifdef MT_BENCH_OPENBLAS
    std::fprintf(stderr, "# OpenBLAS: %d thread(s), %s\n", openblas_get_num_threads(), openblas_get_config());
    bench_gemm1024();
    bench_products("gpt", gpt);
    bench_products("cnn", cnn);
    bench::report_cpu_share("openblas");
#else
    std::fprintf(stderr, "bench_gemm_floor: built without OpenBLAS (bench/CMakeLists.txt found no cblas.h): "
                 "flops only\n");
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_floor: %s\n", e.what());
    return 1;
  }
}
