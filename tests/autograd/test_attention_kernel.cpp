// The CPU attention kernel's pieces at the sizes its tiles and blocks do not divide: small_gemm
// (Note [Attention's products in registers]) against plain loops, and the fused float32 attention
// against the composition (matmul, masked softmax, matmul) run in float64 on the same values, for
// one query, odd lengths, head sizes 1 to 64 and Tq != Tk, with and without the causal mask.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "autograd/detail/reference_ops.h"
#include "minitrain.h"
#include "tensor/cpu/small_gemm.h"

using namespace mt;

namespace {

Generator gen(4242);

template <typename T>
std::vector<T> random_values(int64_t n) {
  const std::vector<double> x = (rand({n}, gen, {.dtype = kFloat64}) * 2.0 - 1.0).to_vector<double>();
  return std::vector<T>(x.begin(), x.end());
}

// C (+)= A·B through small_gemm and through plain loops (A transposed or not), largest difference.
template <typename T>
double small_gemm_error(int64_t m, int64_t n, int64_t k, bool a_transposed, bool accumulate) {
  const int64_t lda = (a_transposed ? m : k) + 3, ldb = n + 5, ldc = n + 2;  // padded rows: strides honoured
  const std::vector<T> A = random_values<T>((a_transposed ? k : m) * lda), B = random_values<T>(k * ldb);
  std::vector<T> C = random_values<T>(m * ldc), expected = C;
  const int64_t a_row = a_transposed ? 1 : lda, a_col = a_transposed ? lda : 1;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = accumulate ? expected[i * ldc + j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += double(A[i * a_row + p * a_col]) * double(B[p * ldb + j]);
      expected[i * ldc + j] = T(acc);
    }
  cpu::small_gemm<T>(m, n, k, A.data(), a_row, a_col, B.data(), ldb, C.data(), ldc, accumulate);
  double worst = 0;
  for (int64_t i = 0; i < m * ldc; ++i) {
    const bool padding = i % ldc >= n;  // must be left as it was
    worst = std::max(worst, padding ? (C[i] == expected[i] ? 0.0 : 1.0) : std::abs(double(C[i]) - double(expected[i])));
  }
  return worst;
}

}  // namespace

TEST_CASE("small_gemm: every tile shape and left-over row and column, transposed A, accumulate, k = 0") {
  for (const int64_t m : {1, 3, 4, 5, 8, 13})
    for (const int64_t n : {1, 3, 4, 7, 8, 9, 16, 24, 31, 32, 33, 47, 64, 70})
      for (const int64_t k : {0, 1, 5, 32, 67})
        for (const bool transposed : {false, true})
          for (const bool accumulate : {false, true}) {
            INFO(m, "x", n, "x", k, " transposed ", transposed, " accumulate ", accumulate);
            CHECK(small_gemm_error<double>(m, n, k, transposed, accumulate) <= 1e-13);
            CHECK(small_gemm_error<float>(m, n, k, transposed, accumulate) <= 2e-5);
          }
}

TEST_CASE("attention: float32 kernel against the float64 composition at sizes its blocks do not divide") {
  struct Case {
    int64_t B, H, Tq, Tk, d;
  };
  const Case cases[] = {{1, 1, 1, 1, 1},  {2, 1, 1, 5, 8},   {1, 2, 7, 7, 1},    {2, 3, 9, 9, 8},
                        {1, 1, 17, 17, 64}, {1, 2, 64, 64, 32}, {1, 1, 65, 65, 33}, {2, 1, 3, 19, 8},
                        {1, 2, 21, 5, 12},  {1, 1, 13, 40, 64}};
  for (const Case& c : cases)
    for (const bool causal : {false, true}) {
      INFO("B ", c.B, " H ", c.H, " Tq ", c.Tq, " Tk ", c.Tk, " d ", c.d, " causal ", causal);
      const Tensor q = rand({c.B, c.H, c.Tq, c.d}, gen, {.dtype = kFloat64}) * 4.0 - 2.0;
      const Tensor k = rand({c.B, c.H, c.Tk, c.d}, gen, {.dtype = kFloat64}) * 4.0 - 2.0;
      const Tensor v = rand({c.B, c.H, c.Tk, c.d}, gen, {.dtype = kFloat64}) * 2.0 - 1.0;
      const Tensor w = rand({c.B, c.H, c.Tq, c.d}, gen, {.dtype = kFloat64});
      std::vector<Tensor> fused_in, ref_in;
      for (const Tensor& t : {q, k, v}) {
        fused_in.push_back(t.to(kFloat32).detach().requires_grad_());
        ref_in.push_back(t.detach().clone().requires_grad_());
      }
      const Tensor fused = scaled_dot_product_attention(fused_in[0], fused_in[1], fused_in[2], {.causal = causal});
      const Tensor ref = reference::scaled_dot_product_attention(ref_in[0], ref_in[1], ref_in[2], {.causal = causal});
      (fused * w.to(kFloat32)).sum().backward();
      (ref * w).sum().backward();
      CHECK((fused.to(kFloat64) - ref).abs().max().item() <= 1e-5);
      for (int i = 0; i < 3; ++i) {
        INFO("gradient of input ", i);
        CHECK((fused_in[i].grad().to(kFloat64) - ref_in[i].grad()).abs().max().item() <= 5e-5);
      }
    }
}
