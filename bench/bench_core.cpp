// bench_core: minitrain's side of the minitrain-vs-PyTorch comparison (bench/README.md; bench/run.sh
// runs it beside torch/bench_torch.cpp and bench_torch.py, which time the same three workloads).
//   a. tiny_add     a + b on two 16-float tensors, no grad: the fixed cost of one op (checks,
//                   allocation, dispatch), since the arithmetic itself is a few nanoseconds.
//   b. gemm1024     1024×1024 float32 matmul, in GFLOP/s; beside it OpenBLAS's cblas_sgemm called
//                   directly and Eigen's own GEMM, on the same sizes: what our matmul costs above
//                   the BLAS it calls.
//   c. seed_*       forward + backward of the seed model's loss ((x·wᵀ + b) − y)².mean(), with
//                   x: (32, 10)  w: (1, 10)  b: (1)  y: (32, 1), written with mt::linear and with
//                   matmul + add: almost all overhead (graph recording, engine), little math.
//   d. *_step       whole training steps through nn/ and optim/ (zero_grad, forward, backward,
//                   step): seed_step = Linear(10, 1), batch 32, SGD lr 0.01, MSE; mlp_step =
//                   784-256-10 with ReLU, batch 128, SGD lr 0.01 momentum 0.9, cross-entropy.
// One thread unless MT_NUM_THREADS says otherwise (bench/threads.sh sets it). Output:
// `<impl> <metric> <value>` lines on stdout; the spread of the repetitions goes to stderr.
// Correctness is the tests' job; this only checks that the three GEMMs agree, so a wrong fast path
// cannot pass for a fast one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include "bench/timing.h"
#include "minitrain.h"
#include "tensor/backend.h"  // cpu_gemm_library

#ifdef MT_BENCH_OPENBLAS
#include <cblas.h>
#endif
#include "tensor/cpu/eigen_core.h"

namespace {

using mt::Tensor;

// ---- a. tiny op overhead --------------------------------------------------------------------------

void bench_tiny_add() {
  mt::Generator gen(1);
  const Tensor a = mt::randn({16}, gen), b = mt::randn({16}, gen);  // no requires_grad
  Tensor c;
  const bench::Timing t = bench::time_per_call([&] { c = a + b; });
  bench::report("minitrain", "tiny_add_us", bench::micros, t);
}

// ---- b. GEMM 1024 ---------------------------------------------------------------------------------

constexpr int64_t kN = 1024;
constexpr double kGemmFlop = 2.0 * kN * kN * kN;  // one multiply and one add per (i, j, p)

void report_gemm(const char* impl, const bench::Timing& t) {
  bench::report(impl, "gemm1024_gflops", [](double seconds) { return kGemmFlop / seconds * 1e-9; }, t);
}

// The largest |x - y| relative to the largest |y|; the three GEMMs sum in different orders, so
// they agree to float rounding (~1e-6), not bit for bit.
double relative_difference(const float* x, const float* y, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
  }
  return diff / scale;
}

int bench_gemm() {
  mt::Generator gen(2);
  // a, b: (N, N) row-major, shared by the three implementations.
  const Tensor a = mt::randn({kN, kN}, gen), b = mt::randn({kN, kN}, gen);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();

  // Ours: allocates the (N, N) result on every call, as user code does.
  Tensor c;
  report_gemm("minitrain", bench::time_per_call([&] { c = mt::matmul(a, b); }, 1.0, 5));
  const float* ours = c.data_ptr<float>();

  // The references write into a (N, N) buffer allocated once, 64-byte aligned like ours: an
  // std::vector's 16-byte alignment splits AVX-512 stores across cache lines and costs OpenBLAS
  // a few percent, which would flatter our matmul.
  const Tensor ref_tensor = mt::empty({kN, kN});
  float* ref = ref_tensor.data_ptr<float>();
  int failures = 0;
  const auto check = [&](const char* impl) {
    const double d = relative_difference(ours, ref, kN * kN);
    std::fprintf(stderr, "# gemm: minitrain vs %s: max relative difference %.2g\n", impl, d);
    if (d > 1e-4) {
      std::fprintf(stderr, "bench_core: minitrain's matmul disagrees with %s (difference %.2g)\n", impl, d);
      ++failures;
    }
  };

#ifdef MT_BENCH_OPENBLAS
  // OpenBLAS directly: the floor our matmul is compared against.
  report_gemm("openblas", bench::time_per_call([&] {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, pa, kN, pb, kN,
                            0.0f, ref, kN);
              }, 1.0, 5));
  check("OpenBLAS");
#endif

  // Eigen's own GEMM (what minitrain runs where Note [Which GEMM] picks it, or MT_GEMM=eigen), on row-major maps.
  // Single-threaded: Eigen parallelises only when compiled with OpenMP, which this build is not.
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> ea(pa, kN, kN), eb(pb, kN, kN);
  Eigen::Map<RowMajor> ec(ref, kN, kN);
  report_gemm("eigen", bench::time_per_call([&] { ec.noalias() = ea * eb; }, 1.0, 5));
  check("Eigen");
  return failures;
}

// ---- c. seed model forward + backward -------------------------------------------------------------

void bench_seed() {
  mt::Generator gen(3);
  const Tensor x = mt::randn({32, 10}, gen);  // x: (B=32, in=10)
  const Tensor y = mt::randn({32, 1}, gen);   // y: (B, out=1)
  const Tensor w = mt::randn({1, 10}, gen, {.requires_grad = true});  // w: (out, in)
  const Tensor b = mt::zeros({1}, {.requires_grad = true});           // b: (out)

  // One training step's math, minus the update: fresh gradients, forward, backward.
  const auto step = [&](auto&& forward) {
    return [&, forward] {
      w.set_grad(Tensor());
      b.set_grad(Tensor());
      const Tensor loss = (forward() - y).pow(2).mean();
      loss.backward();
    };
  };
  const auto with_linear = [&] { return mt::linear(x, w, b); };
  const auto with_matmul = [&] { return mt::matmul(x, w.t()) + b; };

  const bench::Timing tl = bench::time_per_call(step(with_linear));
  bench::report("minitrain", "seed_linear_us", bench::micros, tl);
  const bench::Timing tm = bench::time_per_call(step(with_matmul));
  bench::report("minitrain", "seed_matmul_us", bench::micros, tm);
}

// ---- d. training steps ----------------------------------------------------------------------------

// One step: zero_grad, forward, loss, backward, update, as mini_train runs it.
template <typename Loss>
auto train_step(mt::nn::Module& model, mt::optim::Optimizer& opt, Loss& loss_fn, const Tensor& x, const Tensor& y) {
  return [&] {
    opt.zero_grad();
    const Tensor loss = loss_fn(model.forward(x), y);
    loss.backward();
    opt.step();
  };
}

void bench_train_steps() {
  namespace nn = mt::nn;
  mt::Generator gen(4);
  mt::manual_seed(4);
  {  // x: (32, 10)  y: (32, 1)
    const Tensor x = mt::randn({32, 10}, gen), y = mt::randn({32, 1}, gen);
    nn::Linear model(10, 1);
    mt::optim::SGD opt(model.parameters(), {.lr = 0.01});
    nn::MSELoss loss_fn;
    bench::report("minitrain", "seed_step_us", bench::micros,
                  bench::time_per_call(train_step(model, opt, loss_fn, x, y)));
  }
  {  // x: (128, 784)  labels: (128) int64
    const Tensor x = mt::randn({128, 784}, gen);
    const Tensor y = mt::from_vector(std::vector<int64_t>(128, 0), {128});
    for (int64_t i = 0; i < 128; ++i) y.data_ptr<int64_t>()[i] = i % 10;
    nn::Sequential model(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(256, 10));
    mt::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    nn::CrossEntropyLoss loss_fn;
    bench::report("minitrain", "mlp_step_ms", [](double s) { return s * 1e3; },
                  bench::time_per_call(train_step(model, opt, loss_fn, x, y), 0.5, 7));
  }
}

}  // namespace

int main() {
  try {
#ifdef MT_BENCH_OPENBLAS
    // minitrain's matmul goes through this same OpenBLAS; one thread for both (the environment
    // variable OPENBLAS_NUM_THREADS=1 that run.sh sets does the same before the library starts).
    openblas_set_num_threads(1);
#endif
    std::fprintf(stderr, "# minitrain: GEMM via %s, single-threaded\n", mt::cpu_gemm_library());
    bench_tiny_add();
    const int failures = bench_gemm();
    bench_seed();
    bench_train_steps();
    bench::report_cpu_share("minitrain");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_core: %s\n", e.what());
    return 1;
  }
}
