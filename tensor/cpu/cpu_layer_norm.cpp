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
//
// bfloat16 and float16 compute in float32 (Note [Low-precision compute type]): each row (or, for dw
// and db, each row's block of columns) is widened into a float32 buffer, mean and rstd are float32
// tensors (raw_transformer.cpp makes them so), and y, dx, dw and db are rounded once when stored.
#include <algorithm>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/norm_rows.h"

namespace mt {
namespace {

// Columns per task of dw and db, a multiple of the vector width: a chunk boundary never moves
// which columns take the vectorised loop and which its scalar tail.
constexpr int64_t kColumnBlock = 64;

// Note [Layer norm rows that do not sum to 0]: a row's mean rounded to T is not its mean, so
// x - mean sums to n·e, with e up to half an ulp of the mean, not to 0. The backward's formula
// assumes Σx̂ = 0, and where dx is itself a small difference the e term swamps it: for n = 2, x̂ is
// ±1 but for eps and dx₁ = rstd·(g₁ - g₂)/2·eps/(var + eps), a millionth of g (float32, rows around
// 10: dx was off by 2e-2, PyTorch's kernel by 4e-2, against float64). So the centred row has its
// own mean taken off too: that mean is small, held to a far finer absolute precision than the
// row's, and the row then sums to 0 to that precision (dx off by 3e-5 in the same case). The
// forward does the same for y and saves the corrected mean; the backward recentres from it. The
// group norm kernel (cpu_group_norm.cpp) does the same per (sample, group) row; both call
// cpu::centre (norm_rows.h).
using cpu::centre;
using cpu::ConstRow;
using cpu::Row;

template <typename T>
using Column = Eigen::Array<T, Eigen::Dynamic, 1>;

// n values at p as compute type C: a map of p when T is C, else widened into buf.
template <typename T, typename C = compute_t<T>>
ConstRow<C> read_as(const T* p, int64_t n, Column<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return ConstRow<C>(p, n);
  } else {
    buf.resize(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = C(p[i]);
    return ConstRow<C>(buf.data(), n);
  }
}

// p[0, n) = value (an expression in compute type C): in place when T is C, else through buf, rounded once.
template <typename T, typename C, typename E>
void write_as(T* p, int64_t n, const E& value, Column<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    Row<T>(p, n) = value;
  } else {
    buf = value;
    for (int64_t i = 0; i < n; ++i) p[i] = T(buf[i]);
  }
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
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "layer_norm", [&]<typename T>() {
    using C = compute_t<T>;
    Column<C> wbuf, bbuf;
    const ConstRow<C> w = read_as(cpu::data<const T>(weight), n, wbuf), b = read_as(cpu::data<const T>(bias), n, bbuf);
    C* mu = cpu::data<C>(mean);
    C* rs = cpu::data<C>(rstd);
    parallel_for(rows, cpu::kGrainWork / n, [&](int64_t lo, int64_t hi) {  // rows are independent
      Column<C> c(n), xbuf, ybuf;
      for (int64_t r = lo; r < hi; ++r) {
        const ConstRow<C> xr = read_as(cpu::data<const T>(x) + r * n, n, xbuf);
        const C m = xr.sum() / C(n);
        const C residue = centre(c, xr, m);  // Note [Layer norm rows that do not sum to 0]
        const C inv = C(1) / std::sqrt(c.square().sum() / C(n) + C(eps));
        write_as(cpu::data<T>(out) + r * n, n, c * inv * w + b, ybuf);
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
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using C = compute_t<T>;
    Column<C> wbuf;
    const ConstRow<C> w = read_as(cpu::data<const T>(weight), n, wbuf);
    const C* mu = cpu::data<const C>(mean);
    const C* rs = cpu::data<const C>(rstd);
    const T* xs = cpu::data<const T>(x);
    const T* gs = cpu::data<const T>(dy);
    // dx: rows are independent.
    parallel_for(rows, cpu::kGrainWork / n, [&](int64_t lo, int64_t hi) {
      Column<C> xhat(n), gw(n), xbuf, gbuf, dbuf;
      for (int64_t r = lo; r < hi; ++r) {
        const ConstRow<C> xr = read_as(xs + r * n, n, xbuf), gr = read_as(gs + r * n, n, gbuf);
        centre(xhat, xr, mu[r]);  // Note [Layer norm rows that do not sum to 0]
        xhat *= rs[r];
        gw = gr * w;
        const C mean_g = gw.sum() / C(n), mean_gx = (gw * xhat).sum() / C(n);
        write_as(cpu::data<T>(dx) + r * n, n, rs[r] * (gw - mean_g - xhat * mean_gx), dbuf);
      }
    });
    // dw, db: sums over rows, so the split is over fixed blocks of columns instead, each summing
    // all rows in order (Note [Fixed chunks]); x̂ is recomputed rather than kept.
    T* dw = cpu::data<T>(dweight);
    T* db = cpu::data<T>(dbias);
    const int64_t grain = (cpu::kGrainWork / std::max<int64_t>(rows, 1) / kColumnBlock + 1) * kColumnBlock;
    parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
      Column<C> dwb = Column<C>::Zero(hi - lo), dbb = Column<C>::Zero(hi - lo), xbuf, gbuf, out;
      for (int64_t r = 0; r < rows; ++r) {
        const ConstRow<C> xr = read_as(xs + r * n + lo, hi - lo, xbuf), gr = read_as(gs + r * n + lo, hi - lo, gbuf);
        dwb += gr * ((xr - mu[r]) * rs[r]);
        dbb += gr;
      }
      write_as(dw + lo, hi - lo, dwb, out);
      write_as(db + lo, hi - lo, dbb, out);
    });
  });
}

}  // namespace mt
