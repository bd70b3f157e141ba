// gemm_probe: which GEMM is faster on the machine that configures a native build (Note [Which GEMM],
// cmake/Dependencies.cmake runs it through try_run). It times Eigen's own GEMM and OpenBLAS's
// cblas_sgemm, both on one thread, on the products the workloads make: the MLP 784-256-10 layer's
// forward and its two backward products at batch 128, and 512² and 1024² squares. The libraries
// take turns, best of 5 each, and the figure is total FLOP over the summed best times. Eigen is
// picked only when at least 5 % faster: a near tie keeps OpenBLAS. Output, one line:
//   eigen <GFLOP/s> openblas <GFLOP/s> pick <Eigen|OpenBLAS>
// Not part of the library; compiled with -O3 -march=native like a native build.
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>

namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Product {
  Matrix a, b, c;
};

// Best time of 5 for each of f and g, taking turns, so that a change in the machine's speed meets both.
template <typename F, typename G>
void best_seconds(F&& f, G&& g, double& f_s, double& g_s) {
  const auto seconds = [](auto&& h) {
    const auto t0 = std::chrono::steady_clock::now();
    h();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double best_f = 1e30, best_g = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    best_f = std::min(best_f, seconds(f));
    best_g = std::min(best_g, seconds(g));
  }
  f_s += best_f;
  g_s += best_g;
}

}  // namespace

int main() {
  openblas_set_num_threads(1);  // minitrain calls it on one thread per block (Note [GEMM on the pool])
  const int shapes[][3] = {{128, 784, 256}, {256, 128, 784}, {128, 256, 784}, {512, 512, 512}, {1024, 1024, 1024}};
  double flop = 0, eigen_s = 0, openblas_s = 0;
  for (const auto& s : shapes) {
    const int m = s[0], k = s[1], n = s[2];
    Product p{Matrix::Random(m, k), Matrix::Random(k, n), Matrix(m, n)};
    const auto eigen = [&] { p.c.noalias() = p.a * p.b; };
    const auto openblas = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, p.a.data(), k, p.b.data(), n, 0.0f,
                  p.c.data(), n);
    };
    eigen();  // first calls: page faults, OpenBLAS's buffers
    openblas();
    best_seconds(eigen, openblas, eigen_s, openblas_s);
    flop += 2.0 * m * n * k;
  }
  const bool eigen_wins = openblas_s >= 1.05 * eigen_s;
  std::printf("eigen %.1f openblas %.1f pick %s\n", flop / eigen_s * 1e-9, flop / openblas_s * 1e-9,
              eigen_wins ? "Eigen" : "OpenBLAS");
  return 0;
}
