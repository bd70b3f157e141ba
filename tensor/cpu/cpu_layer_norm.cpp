// CpuBackend::layer_norm and layer_norm_backward: the fused kernels, one row at a time. The
// composition they replace (mean, sub, mul, mean, add, sqrt, div, mul, add: nine ops and as many
// temporaries) is mt::reference::layer_norm (autograd/detail/reference_ops.h); tests compare the two.
//
// Forward, per row x of n values (two passes: the mean first, then the variance around it, which
// keeps the digits that the one-pass Σx² - (Σx)²/n loses when the mean is large; and the centred
// row recentred by its own small mean, Note [Layer norm rows that do not sum to 0]):
//   mean = Σx/n,  rstd = 1/√(Σ(x - mean)²/n + eps),  y = (x - mean)·rstd·w + b
// Backward, with x̂ = (x - mean)·rstd and g = dy·w (x̂ depends on every x of its row through mean
// and rstd: dx̂/dx = rstd·(I - 1/n - x̂x̂ᵀ/n)):
//   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dw = Σ_rows dy·x̂,  db = Σ_rows dy
// Rows (and, for dw and db, blocks of columns) are split across the intra-op threads in fixed
// chunks, so the bits do not depend on the thread count (Note [Fixed chunks], tensor/parallel.h).
// The row sums are Eigen reductions, which are vectorised (a plain `sum += x[i]` loop is not: the
// compiler may not reorder float additions), and accumulate in T.
#include <algorithm>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_core.h"

namespace mt {
namespace {

// Columns per task of dw and db, a multiple of the vector width: a chunk boundary never moves
// which columns take the vectorised loop and which its scalar tail.
constexpr int64_t kColumnBlock = 64;

template <typename T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Note [Layer norm rows that do not sum to 0]: a row's mean rounded to T is not its mean, so
// x - mean sums to n·e, with e up to half an ulp of the mean, not to 0. The backward's formula
// assumes Σx̂ = 0, and where dx is itself a small difference the e term swamps it: for n = 2, x̂ is
// ±1 but for eps and dx₁ = rstd·(g₁ - g₂)/2·eps/(var + eps), a millionth of g (float32, rows around
// 10: dx was off by 2e-2, PyTorch's kernel by 4e-2, against float64). So the centred row has its
// own mean taken off too: that mean is small, held to a far finer absolute precision than the
// row's, and the row then sums to 0 to that precision (dx off by 3e-5 in the same case). The
// forward does the same for y and saves the corrected mean; the backward recentres from it.
// c = x - m - mean(x - m); returns mean(x - m), what the rounding of m left in the row.
template <typename T>
T centre(Eigen::Array<T, Eigen::Dynamic, 1>& c, const ConstRow<T>& x, T m) {
  c = x - m;
  const T residue = c.sum() / T(c.size());
  c -= residue;
  return residue;
}

void check_layer_norm(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean,
                      const Tensor& rstd) {
  MT_CHECK(x.dim() == 2 && cpu::is_contiguous(x), op, ": CPU kernel needs x as contiguous (rows, n), got ",
           x.sizes());
  const int64_t rows = x.sizes()[0], n = x.sizes()[1];
  for (const Tensor* t : {&w, &b})
    MT_CHECK(t->sizes() == Shape{n} && cpu::is_contiguous(*t), op, ": weight and bias must be contiguous (", n,
             "), got ", t->sizes());
  for (const Tensor* t : {&mean, &rstd})
    MT_CHECK(t->sizes() == Shape{rows} && cpu::is_contiguous(*t), op, ": mean and rstd must be contiguous (",
             rows, "), got ", t->sizes());
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                            const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm("layer_norm", x, weight, bias, mean, rstd);
  const int64_t rows = x.sizes()[0], n = x.sizes()[1];
  MT_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&]<typename T>() {
    const ConstRow<T> w(cpu::data<const T>(weight), n), b(cpu::data<const T>(bias), n);
    T* mu = cpu::data<T>(mean);
    T* rs = cpu::data<T>(rstd);
    parallel_for(rows, cpu::kGrainWork / n, [&](int64_t lo, int64_t hi) {  // rows are independent
      Eigen::Array<T, Eigen::Dynamic, 1> c(n);
      for (int64_t r = lo; r < hi; ++r) {
        const ConstRow<T> xr(cpu::data<const T>(x) + r * n, n);
        const T m = xr.sum() / T(n);
        const T residue = centre(c, xr, m);  // Note [Layer norm rows that do not sum to 0]
        const T inv = T(1) / std::sqrt(c.square().sum() / T(n) + T(eps));
        Row<T>(cpu::data<T>(out) + r * n, n) = c * inv * w + b;
        mu[r] = m + residue, rs[r] = inv;
      }
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd) {
  check_layer_norm("layer_norm_backward", x, weight, dbias, mean, rstd);
  MT_CHECK(dy.sizes() == x.sizes() && dx.sizes() == x.sizes() && cpu::is_contiguous(dy) && dweight.sizes() == weight.sizes(),
           "layer_norm_backward: dy ", dy.sizes(), " and dx ", dx.sizes(), " must be contiguous like x ", x.sizes());
  const int64_t rows = x.sizes()[0], n = x.sizes()[1];
  MT_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const ConstRow<T> w(cpu::data<const T>(weight), n);
    const T* mu = cpu::data<const T>(mean);
    const T* rs = cpu::data<const T>(rstd);
    const T* xs = cpu::data<const T>(x);
    const T* gs = cpu::data<const T>(dy);
    // dx: rows are independent.
    parallel_for(rows, cpu::kGrainWork / n, [&](int64_t lo, int64_t hi) {
      Eigen::Array<T, Eigen::Dynamic, 1> xhat(n), gw(n);
      for (int64_t r = lo; r < hi; ++r) {
        const ConstRow<T> xr(xs + r * n, n), gr(gs + r * n, n);
        centre(xhat, xr, mu[r]);  // Note [Layer norm rows that do not sum to 0]
        xhat *= rs[r];
        gw = gr * w;
        const T mean_g = gw.sum() / T(n), mean_gx = (gw * xhat).sum() / T(n);
        Row<T>(cpu::data<T>(dx) + r * n, n) = rs[r] * (gw - mean_g - xhat * mean_gx);
      }
    });
    // dw, db: sums over rows, so the split is over fixed blocks of columns instead, each summing
    // all rows in order (Note [Fixed chunks]); x̂ is recomputed rather than kept.
    T* dw = cpu::data<T>(dweight);
    T* db = cpu::data<T>(dbias);
    const int64_t grain = (cpu::kGrainWork / std::max<int64_t>(rows, 1) / kColumnBlock + 1) * kColumnBlock;
    parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
      Row<T> dwb(dw + lo, hi - lo), dbb(db + lo, hi - lo);
      dwb.setZero(), dbb.setZero();
      for (int64_t r = 0; r < rows; ++r) {
        const ConstRow<T> xr(xs + r * n + lo, hi - lo), gr(gs + r * n + lo, hi - lo);
        dwb += gr * ((xr - mu[r]) * rs[r]);
        dbb += gr;
      }
    });
  });
}

}  // namespace mt
