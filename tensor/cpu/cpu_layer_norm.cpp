// CpuBackend::layer_norm and layer_norm_backward: the fused kernels, one row at a time. The
// composition they replace (mean, sub, mul, mean, add, sqrt, div, mul, add: nine ops and as many
// temporaries) is mt::reference::layer_norm (autograd/reference_ops.h); tests compare the two.
//
// Forward, per row x of n values (two passes: the mean first, then the variance around it, which
// keeps the digits that the one-pass Σx² - (Σx)²/n loses when the mean is large):
//   mean = Σx/n,  rstd = 1/√(Σ(x - mean)²/n + eps),  y = (x - mean)·rstd·w + b
// Backward, with x̂ = (x - mean)·rstd and g = dy·w (x̂ depends on every x of its row through mean
// and rstd: dx̂/dx = rstd·(I - 1/n - x̂x̂ᵀ/n)):
//   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dw = Σ_rows dy·x̂,  db = Σ_rows dy
// The row sums are Eigen reductions, which are vectorised (a plain `sum += x[i]` loop is not: the
// compiler may not reorder float additions), and accumulate in T.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_core.h"

namespace mt {
namespace {

template <typename T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

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
    for (int64_t r = 0; r < rows; ++r) {
      const ConstRow<T> xr(cpu::data<const T>(x) + r * n, n);
      const T m = xr.sum() / T(n);
      const T inv = T(1) / std::sqrt((xr - m).square().sum() / T(n) + T(eps));
      Row<T>(cpu::data<T>(out) + r * n, n) = (xr - m) * inv * w + b;
      mu[r] = m, rs[r] = inv;
    }
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
    Row<T> dw(cpu::data<T>(dweight), n), db(cpu::data<T>(dbias), n);
    dw.setZero(), db.setZero();
    Eigen::Array<T, Eigen::Dynamic, 1> xhat(n), gw(n);
    for (int64_t r = 0; r < rows; ++r) {
      const ConstRow<T> xr(cpu::data<const T>(x) + r * n, n), gr(cpu::data<const T>(dy) + r * n, n);
      xhat = (xr - mu[r]) * rs[r];
      gw = gr * w;
      dw += gr * xhat;
      db += gr;
      const T mean_g = gw.sum() / T(n), mean_gx = (gw * xhat).sum() / T(n);
      Row<T>(cpu::data<T>(dx) + r * n, n) = rs[r] * (gw - mean_g - xhat * mean_gx);
    }
  });
}

}  // namespace mt
