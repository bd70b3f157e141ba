// CpuBackend::softmax: softmax or log-softmax over the last dim of a contiguous tensor, one row at
// a time (rows split across the intra-op threads). Only the forward: the backward is composed from
// primitives in autograd/.
//
// Numerically stable form: with m = max(x),
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
//   log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))
// Subtracting m changes nothing mathematically but keeps exp from overflowing (x = 1000 would give
// inf/inf = NaN), and the largest term is exp(0) = 1, so the sum is never 0 and log never sees 0.
#include <cmath>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

// x, y: (n). y may alias x.
template <typename T>
void softmax_row(T* y, const T* x, int64_t n, bool log) {
  T m = x[0];
  for (int64_t i = 1; i < n; ++i) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;  // NaN propagates
  T sum = 0;
  if (log) {
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - m);
    // (x - m) - log(sum), not x - (m + log(sum)): x - m is exact near the max, while m + log(sum)
    // would round at the magnitude of m and lose digits when the inputs are large.
    const T log_sum = std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = std::exp(x[i] - m);
      sum += y[i];
    }
    const T inv = T(1) / sum;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

}  // namespace

void CpuBackend::softmax(const Tensor& out, const Tensor& in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  MT_CHECK(cpu::is_contiguous(in) && cpu::is_contiguous(out) && in.sizes() == out.sizes(), name,
           ": CPU kernel needs contiguous in and out of one shape, got ", in.sizes(), " and ", out.sizes());
  if (in.numel() == 0) return;
  const int64_t n = in.dim() == 0 ? 1 : in.sizes().back();  // a 0-dim tensor is one row of one
  const int64_t rows = in.numel() / n;
  MT_DISPATCH_FLOAT(in.dtype(), name, [&]<typename T>() {
    const T* x = cpu::data<const T>(in);
    T* y = cpu::data<T>(out);
    // Rows are independent: chunks of whole rows, with an exp per element (Note [Fixed chunks]).
    parallel_for(rows, cpu::kGrainTranscendental / n, [=](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) softmax_row(y + r * n, x + r * n, n, log);
    });
  });
}

}  // namespace mt
