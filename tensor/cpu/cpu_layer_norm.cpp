// CpuBackend::layer_norm and layer_norm_backward: the fused kernels, one row at a time. The
// composition they replace (mean, sub, mul, mean, add, rsqrt, mul, mul, add: nine ops and as many
// temporaries) stays in autograd/reference_ops.h, and tests compare the two.
//
// Forward, per row x of n values (two passes: the mean first, then the variance around it, which
// keeps the digits that the one-pass Σx² - (Σx)²/n loses when the mean is large):
//   mean = Σx/n,  rstd = 1/√(Σ(x - mean)²/n + eps),  y = (x - mean)·rstd·w + b
// Backward, with x̂ = (x - mean)·rstd and g = dy·w (the derivation: x̂ depends on every x of its row
// through mean and rstd; dx̂/dx = rstd·(I - 1/n - x̂x̂ᵀ/n)):
//   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dw = Σ_rows dy·x̂,  db = Σ_rows dy
// Accumulations are in double for float32 rows too: a row is short (the model width), so the cost is
// small, and the result then does not depend on the row length's rounding.
#include <cmath>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

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
    const T* xs = cpu::data<const T>(x);
    const T* w = cpu::data<const T>(weight);
    const T* b = cpu::data<const T>(bias);
    T* y = cpu::data<T>(out);
    T* mu = cpu::data<T>(mean);
    T* rs = cpu::data<T>(rstd);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += xr[i];
      const double m = sum / n;
      double sq = 0;
      for (int64_t i = 0; i < n; ++i) sq += (xr[i] - m) * (xr[i] - m);
      const double inv = 1.0 / std::sqrt(sq / n + eps);
      const T mt = T(m), it = T(inv);
      T* yr = y + r * n;
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mt) * it * w[i] + b[i];
      mu[r] = mt, rs[r] = it;
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
    const T* xs = cpu::data<const T>(x);
    const T* g = cpu::data<const T>(dy);
    const T* w = cpu::data<const T>(weight);
    const T* mu = cpu::data<const T>(mean);
    const T* rs = cpu::data<const T>(rstd);
    T* dxs = cpu::data<T>(dx);
    T* dw = cpu::data<T>(dweight);
    T* db = cpu::data<T>(dbias);
    std::fill(dw, dw + n, T(0));
    std::fill(db, db + n, T(0));
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xs + r * n;
      const T* gr = g + r * n;
      const T m = mu[r], s = rs[r];
      double sum_g = 0, sum_gx = 0;  // Σ dy·w and Σ dy·w·x̂ over the row
      for (int64_t i = 0; i < n; ++i) {
        const T xhat = (xr[i] - m) * s;
        const T gw = gr[i] * w[i];
        sum_g += gw, sum_gx += gw * xhat;
        dw[i] += gr[i] * xhat;
        db[i] += gr[i];
      }
      const T mean_g = T(sum_g / n), mean_gx = T(sum_gx / n);
      T* dxr = dxs + r * n;
      for (int64_t i = 0; i < n; ++i) dxr[i] = s * (gr[i] * w[i] - mean_g - (xr[i] - m) * s * mean_gx);
    }
  });
}

}  // namespace mt
