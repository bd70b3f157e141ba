// CpuBackend::group_norm and group_norm_backward: the fused kernels, one (sample, group) row at a
// time. The composition they replace (a layer norm over the groups, then the per-channel scale and
// shift as broadcast mul and add, whose backwards add two passes over x and two reductions over
// (N, S) each) is mt::reference::group_norm (autograd/detail/reference_ops.h); tests compare the two.
//
// x: (N, C, S) seen as N·G rows of D = (C/G)·S values; row r = (n, g) holds channels g·C/G onwards.
// Forward, per row, as layer norm's (the mean, then the variance around it, and the row recentred
// by its own small mean, Note [Layer norm rows that do not sum to 0]):
//   mean = Σx/D,  rstd = 1/√(Σ(x - mean)²/D + eps),  y = (x - mean)·(rstd·w[c]) + b[c] per channel c
// Backward, with x̂ = (x - mean)·rstd and g = dy·w[c]: one read of x and dy gives per channel
//   sdy[n, c] = Σ_s dy,  sdyx[n, c] = Σ_s dy·x̂
// hence the row's mean(g) = Σ_c w[c]·sdy[n, c]/D and mean(g·x̂) = Σ_c w[c]·sdyx[n, c]/D; a second
// pass over the row (still in cache) writes
//   dx = rstd·(w[c]·dy - mean(g) - x̂·mean(g·x̂))
// and after all rows dw[c] = Σ_n sdyx[n, c], db[c] = Σ_n sdy[n, c], summed over n in order.
// Rows are split across the intra-op threads in fixed chunks and dw, db are summed after them, so
// the bits do not depend on the thread count (Note [Fixed chunks], tensor/parallel.h). Sums are
// Eigen reductions (vectorised) accumulating in T, as layer norm's.
#include <algorithm>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/norm_rows.h"

namespace mt {
namespace {

using cpu::centre;
using cpu::ConstRow;
using cpu::Row;

// The layout of a call: N·G rows of D = cg·s values, cg channels of s positions each.
struct Groups {
  int64_t rows, groups, cg, s, d;
};

Groups check_group_norm(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean,
                        const Tensor& rstd) {
  MT_CHECK(x.dim() == 3 && cpu::is_contiguous(x), op, ": CPU kernel needs x as contiguous (N, C, S), got ",
           x.sizes());
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  MT_CHECK(mean.dim() == 2 && mean.size(0) == n && mean.size(1) > 0 && c % mean.size(1) == 0 &&
               rstd.sizes() == mean.sizes() && cpu::is_contiguous(mean) && cpu::is_contiguous(rstd),
           op, ": mean and rstd must be contiguous (N, G) with G dividing C, got ", mean.sizes(), " and ",
           rstd.sizes(), " for x ", x.sizes());
  for (const Tensor* t : {&w, &b})
    MT_CHECK(t->sizes() == Shape{c} && cpu::is_contiguous(*t), op, ": weight and bias must be contiguous (", c,
             "), got ", t->sizes());
  const int64_t groups = mean.size(1), cg = c / groups;
  return {.rows = n * groups, .groups = groups, .cg = cg, .s = s, .d = cg * s};
}

// Rows per chunk: about kGrainWork values.
int64_t row_grain(const Groups& l) { return cpu::kGrainWork / std::max<int64_t>(l.d, 1); }

}  // namespace

void CpuBackend::group_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                            const Tensor& weight, const Tensor& bias, double eps) {
  const Groups l = check_group_norm("group_norm", x, weight, bias, mean, rstd);
  MT_DISPATCH_FLOAT(x.dtype(), "group_norm", [&]<typename T>() {
    const T* xs = cpu::data<const T>(x);
    const T* w = cpu::data<const T>(weight);
    const T* b = cpu::data<const T>(bias);
    T* ys = cpu::data<T>(out);
    T* mu = cpu::data<T>(mean);
    T* rs = cpu::data<T>(rstd);
    parallel_for(l.rows, row_grain(l), [&](int64_t lo, int64_t hi) {  // rows are independent
      Eigen::Array<T, Eigen::Dynamic, 1> centred(l.d);
      for (int64_t r = lo; r < hi; ++r) {
        const ConstRow<T> xr(xs + r * l.d, l.d);
        const T m = xr.sum() / T(l.d);
        const T residue = centre(centred, xr, m);  // Note [Layer norm rows that do not sum to 0]
        const T inv = T(1) / std::sqrt(centred.square().sum() / T(l.d) + T(eps));
        const int64_t c0 = (r % l.groups) * l.cg;
        for (int64_t k = 0; k < l.cg; ++k)
          Row<T>(ys + r * l.d + k * l.s, l.s) = centred.segment(k * l.s, l.s) * (inv * w[c0 + k]) + b[c0 + k];
        mu[r] = m + residue, rs[r] = inv;
      }
    });
  });
}

void CpuBackend::group_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                     const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const Groups l = check_group_norm("group_norm_backward", x, weight, dbias, mean, rstd);
  MT_CHECK(dy.sizes() == x.sizes() && dx.sizes() == x.sizes() && cpu::is_contiguous(dy) && cpu::is_contiguous(dx) &&
               dweight.sizes() == weight.sizes() && cpu::is_contiguous(dweight),
           "group_norm_backward: dy ", dy.sizes(), " and dx ", dx.sizes(), " must be contiguous like x ", x.sizes());
  const int64_t n = x.size(0), c = x.size(1);
  MT_DISPATCH_FLOAT(x.dtype(), "group_norm_backward", [&]<typename T>() {
    const T* xs = cpu::data<const T>(x);
    const T* gs = cpu::data<const T>(dy);
    const T* w = cpu::data<const T>(weight);
    const T* mu = cpu::data<const T>(mean);
    const T* rs = cpu::data<const T>(rstd);
    T* dxs = cpu::data<T>(dx);
    // (N, C): row r's channels are entries r·cg onwards.
    std::vector<T> sdy(static_cast<size_t>(n * c)), sdyx(static_cast<size_t>(n * c));
    parallel_for(l.rows, row_grain(l), [&](int64_t lo, int64_t hi) {  // rows are independent
      Eigen::Array<T, Eigen::Dynamic, 1> xhat(l.d);
      for (int64_t r = lo; r < hi; ++r) {
        centre(xhat, ConstRow<T>(xs + r * l.d, l.d), mu[r]);  // Note [Layer norm rows that do not sum to 0]
        xhat *= rs[r];
        const int64_t c0 = (r % l.groups) * l.cg;
        T sum_g = 0, sum_gx = 0;
        for (int64_t k = 0; k < l.cg; ++k) {
          const ConstRow<T> gk(gs + r * l.d + k * l.s, l.s);
          const T a = gk.sum(), ax = (gk * xhat.segment(k * l.s, l.s)).sum();
          sdy[r * l.cg + k] = a, sdyx[r * l.cg + k] = ax;
          sum_g += w[c0 + k] * a, sum_gx += w[c0 + k] * ax;
        }
        const T mean_g = sum_g / T(l.d), mean_gx = sum_gx / T(l.d);
        for (int64_t k = 0; k < l.cg; ++k) {
          const ConstRow<T> gk(gs + r * l.d + k * l.s, l.s);
          Row<T>(dxs + r * l.d + k * l.s, l.s) =
              rs[r] * (w[c0 + k] * gk - mean_g - xhat.segment(k * l.s, l.s) * mean_gx);
        }
      }
    });
    T* dw = cpu::data<T>(dweight);
    T* db = cpu::data<T>(dbias);
    std::fill(dw, dw + c, T(0));
    std::fill(db, db + c, T(0));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch) dw[ch] += sdyx[i * c + ch], db[ch] += sdy[i * c + ch];
  });
}

}  // namespace mt
