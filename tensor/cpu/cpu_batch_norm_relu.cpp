// Batch normalisation fused with the ReLU after it, and the max pool after that, on the CPU
// (Backend::batch_norm_stats, batch_norm_relu, batch_norm_relu_backward in tensor/backend.h; why fused:
// Note [Fused batch norm, ReLU and pool] in autograd/functions/batch_norm_relu.cpp).
//
// Every kernel works channel by channel: channel c is N strips of L contiguous values of x: (N, C, L),
// and chunks of channels run on the intra-op threads (tensor/parallel.h). A channel's results depend
// only on its own values, so the bits are the same at any thread count. Sums over a channel are in
// double, in kLanes independent accumulators: one running sum is a chain of dependent adds, which
// runs at one add per add-latency and may not be vectorised (reordering it would change the result).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

constexpr int kLanes = 8;

struct Planes {
  int64_t n, c, l;  // x: (N, C, L)
};

Planes planes_of(const Tensor& x, const char* op) {
  MT_CHECK(x.dim() == 3 && cpu::is_contiguous(x), op, ": CPU kernel needs a contiguous (N, C, L) tensor, got shape ",
           x.sizes());
  return {x.size(0), x.size(1), x.size(2)};
}

// Σ f(j) over j in [0, l), in kLanes double lanes added pairwise at the end.
template <typename F>
double lane_sum(int64_t l, F&& f) {
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= l; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += f(j + k);
  for (int k = 0; j < l; ++j, ++k) lane[k] += f(j);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int k = 0; k < width; ++k) lane[k] += lane[k + width];
  return lane[0];
}

// f(c) for every channel; chunks of channels on the threads, a channel being n·l values of work.
template <typename F>
void for_channels(const Planes& d, F&& f) {
  parallel_for(d.c, cpu::kGrainWork / std::max<int64_t>(d.n * d.l, 1), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) f(c);
  });
}

// ReLU's rule (cpu_elementwise.cpp): negative values become 0, NaN stays NaN.
template <typename T>
inline T relu_value(T v) {
  return v < T(0) ? T(0) : v;
}

// Where each window's taps read the plane: at[t·P + q] = h·W + w of tap t (taps in row-major window
// order) of output q (P = OH·OW outputs, row-major), for windows inside the plane.
std::vector<int32_t> tap_table(const Window2d& w) {
  const int64_t oh_n = w.out_h(), ow_n = w.out_w(), outputs = oh_n * ow_n;
  std::vector<int32_t> at(w.kernel_h * w.kernel_w * outputs);
  for (int64_t i = 0, t = 0; i < w.kernel_h; ++i)
    for (int64_t j = 0; j < w.kernel_w; ++j, ++t)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow)
          at[t * outputs + oh * ow_n + ow] = static_cast<int32_t>((oh * w.stride_h + i) * w.in_w + ow * w.stride_w + j);
  return at;
}

// One plane of the pooled forward, from the plane's ReLU outputs y: out[q] = the max over output q's
// window, indices the first maximum's h·W + w, by max_pool2d's rule (a NaN wins, and a later NaN
// replaces it). The loop runs over the whole output plane for one tap at a time, reading y through
// the tap table: long enough to fill vectors (one output row of the CNN's pools is 14 or 7 values,
// shorter than a vector, and its scalar remainder was a branch per select, mispredicted half the
// time on ReLU's zeros), with the running position in 32-bit lanes beside the floats.
template <typename T>
void pool_plane(const T* __restrict y, T* __restrict out, int64_t* __restrict idx, int32_t* __restrict pos,
                const int32_t* __restrict at, int64_t taps, int64_t outputs) {
  for (int64_t q = 0; q < outputs; ++q) out[q] = y[at[q]], pos[q] = at[q];
  for (int64_t t = 1; t < taps; ++t) {
    const int32_t* tap = at + t * outputs;
    for (int64_t q = 0; q < outputs; ++q) {
      const T v = y[tap[q]];
      const bool take = (v > out[q]) | (v != v);
      out[q] = take ? v : out[q];
      pos[q] = take ? tap[q] : pos[q];
    }
  }
  for (int64_t q = 0; q < outputs; ++q) idx[q] = pos[q];
}

}  // namespace

// mean and biased variance per channel: two passes (the mean first, then Σ (x - mean)²), not
// Σx² - n·mean², which loses the variance to cancellation when |mean| ≫ std (Note [Sync batch norm]).
void CpuBackend::batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  const Planes d = planes_of(x, "batch_norm_stats");
  const double count = static_cast<double>(d.n * d.l);
  MT_DISPATCH_FLOAT(x.dtype(), "batch_norm_stats", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* m = cpu::data<T>(mean);
    T* v = cpu::data<T>(var);
    for_channels(d, [&](int64_t c) {
      double sum = 0, sq = 0;
      for (int64_t s = 0; s < d.n; ++s) {
        const T* xs = src + (s * d.c + c) * d.l;
        sum += lane_sum(d.l, [&](int64_t j) { return static_cast<double>(xs[j]); });
      }
      const double mu = sum / count;
      for (int64_t s = 0; s < d.n; ++s) {
        const T* xs = src + (s * d.c + c) * d.l;
        sq += lane_sum(d.l, [&](int64_t j) {
          const double t = static_cast<double>(xs[j]) - mu;
          return t * t;
        });
      }
      m[c] = static_cast<T>(mu), v[c] = static_cast<T>(sq / count);
    });
  });
}

// y = max((x - mean)·scale + shift, 0), then the pool when given: one read of x, one write of out.
void CpuBackend::batch_norm_relu(const Tensor& out, const Tensor& indices, const Tensor& x, const Tensor& mean,
                                 const Tensor& scale, const Tensor& shift, const Window2d* pool) {
  const Planes d = planes_of(x, "batch_norm_relu");
  const Planes o = planes_of(out, "batch_norm_relu");
  MT_CHECK(o.n == d.n && o.c == d.c && (pool ? o.l == pool->out_h() * pool->out_w() && pool->in_h * pool->in_w == d.l
                                             : o.l == d.l),
           "batch_norm_relu: out ", out.sizes(), " does not match x ", x.sizes());
  MT_CHECK(d.l <= INT32_MAX, "batch_norm_relu: a plane of ", d.l, " values is more than the pool's 32-bit positions hold");
  MT_DISPATCH_FLOAT(x.dtype(), "batch_norm_relu", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* dst = cpu::data<T>(out);
    int64_t* idx = pool ? cpu::data<int64_t>(indices) : nullptr;
    const T* mp = cpu::data<const T>(mean);
    const T* ap = cpu::data<const T>(scale);
    const T* bp = cpu::data<const T>(shift);
    const std::vector<int32_t> at = pool ? tap_table(*pool) : std::vector<int32_t>();
    const int64_t taps = pool ? pool->kernel_h * pool->kernel_w : 0;
    for_channels(d, [&](int64_t c) {
      const T m = mp[c], a = ap[c], b = bp[c];
      std::vector<T> plane(pool ? d.l : 0);     // one plane's ReLU outputs, before the pool
      std::vector<int32_t> pos(pool ? o.l : 0);  // its outputs' winners so far
      for (int64_t s = 0; s < d.n; ++s) {
        const T* xs = src + (s * d.c + c) * d.l;
        T* ys = pool ? plane.data() : dst + (s * d.c + c) * o.l;
        for (int64_t j = 0; j < d.l; ++j) ys[j] = relu_value((xs[j] - m) * a + b);
        if (pool) pool_plane(ys, dst + (s * d.c + c) * o.l, idx + (s * d.c + c) * o.l, pos.data(), at.data(), taps, o.l);
      }
    });
  });
}

// Per channel: dy, dout routed back through the pool's indices (zeros, then each output's gradient
// added at its winner, as max_pool2d's backward adds, so overlapping windows sum) and masked where
// out = 0 (the ReLU's select, Note [Masked gradients] in autograd/functions/elementwise.cpp), is
// built in dx with the sums Σ dy and Σ dy·(x - mean) (with the pool, over the winners only); then
// dx = scale·(dy - (x - mean)·k1 - k2) in one pass.
void CpuBackend::batch_norm_relu_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                          const Tensor& dout, const Tensor& out, const Tensor& indices,
                                          const Tensor& x, const Tensor& mean, const Tensor& inv,
                                          const Tensor& scale, const Window2d* pool, bool batch_stats) {
  const Planes d = planes_of(x, "batch_norm_relu_backward");
  const Planes o = planes_of(dout, "batch_norm_relu_backward");
  MT_CHECK(planes_of(dx, "batch_norm_relu_backward").l == d.l && planes_of(out, "batch_norm_relu_backward").l == o.l &&
               (pool ? o.l == pool->out_h() * pool->out_w() : o.l == d.l),
           "batch_norm_relu_backward: dout ", dout.sizes(), " does not match x ", x.sizes());
  const double count = static_cast<double>(d.n * d.l);
  MT_DISPATCH_FLOAT(x.dtype(), "batch_norm_relu_backward", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    const T* gy = cpu::data<const T>(dout);
    const T* yo = cpu::data<const T>(out);
    const int64_t* idx = pool ? cpu::data<const int64_t>(indices) : nullptr;
    T* gx = cpu::data<T>(dx);
    T* dw = cpu::data<T>(dweight);
    T* db = cpu::data<T>(dbias);
    const T* mp = cpu::data<const T>(mean);
    const T* ip = cpu::data<const T>(inv);
    const T* ap = cpu::data<const T>(scale);
    for_channels(d, [&](int64_t c) {
      const T m = mp[c], a = ap[c];
      double sum_dy = 0, sum_dy_xc = 0;
      for (int64_t s = 0; s < d.n; ++s) {
        const T* xs = src + (s * d.c + c) * d.l;
        const T* g = gy + (s * d.c + c) * o.l;
        const T* y = yo + (s * d.c + c) * o.l;
        if (pool) {  // dy in dx: zeros, and each output's masked gradient added at its winner
          const int64_t* at = idx + (s * d.c + c) * o.l;
          T* dys = gx + (s * d.c + c) * d.l;
          std::fill(dys, dys + d.l, T(0));
          for (int64_t q = 0; q < o.l; ++q) {
            const T gq = y[q] > T(0) ? g[q] : T(0);  // a select: no branch to mispredict
            dys[at[q]] += gq;
            sum_dy += static_cast<double>(gq);
            sum_dy_xc += static_cast<double>(gq) * static_cast<double>(xs[at[q]] - m);
          }
        } else {
          T* dys = gx + (s * d.c + c) * d.l;  // dy, in dx until the last pass
          for (int64_t j = 0; j < d.l; ++j) dys[j] = y[j] > T(0) ? g[j] : T(0);
          sum_dy += lane_sum(d.l, [&](int64_t j) { return static_cast<double>(dys[j]); });
          sum_dy_xc += lane_sum(d.l, [&](int64_t j) {
            return static_cast<double>(dys[j]) * static_cast<double>(xs[j] - m);
          });
        }
      }
      // db = Σ dy, dw = Σ dy·x̂ = inv·Σ dy·(x - mean); through the batch statistics, dx subtracts
      // x̂·dw/n + db/n = (x - mean)·k1 + k2 before the scale.
      const double iv = static_cast<double>(ip[c]);
      db[c] = static_cast<T>(sum_dy), dw[c] = static_cast<T>(sum_dy_xc * iv);
      const T k1 = batch_stats ? static_cast<T>(iv * static_cast<double>(dw[c]) / count) : T(0);
      const T k2 = batch_stats ? static_cast<T>(static_cast<double>(db[c]) / count) : T(0);
      for (int64_t s = 0; s < d.n; ++s) {
        const T* xs = src + (s * d.c + c) * d.l;
        T* dxs = gx + (s * d.c + c) * d.l;
        for (int64_t j = 0; j < d.l; ++j) dxs[j] = (dxs[j] - (xs[j] - m) * k1 - k2) * a;
      }
    });
  });
}

}  // namespace mt
