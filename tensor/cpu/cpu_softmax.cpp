// CpuBackend::softmax: softmax or log-softmax over the last dim of a contiguous tensor, one row at
// a time (rows split across the intra-op threads). Only the forward: the backward is composed from
// primitives in autograd/.
//
// Numerically stable form: with m = max(x),
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
//   log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))
// Subtracting m changes nothing mathematically but keeps exp from overflowing (x = 1000 would give
// inf/inf = NaN), and the largest term is exp(0) = 1, so the sum is never 0 and log never sees 0.
//
// bfloat16 and float16 rows are widened into a float32 row, computed there by the float32 code and
// rounded once (Note [Low-precision compute type]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/vec_exp.h"

namespace mt {
namespace {

// Float32 rows run in 8-lane vectors with the shared exp (Note [Vectorised float exp]); the max and
// the sums run in the 8 lanes too and are combined at the end. float64 keeps std::exp and one
// accumulator.
using namespace cpu::vec;

// max(x) over (n), NaN if any element is NaN: v wins over m when v > m or v is NaN.
float row_max(const float* x, int64_t n) {
  F8 m = splat(x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F8 v = load(x + i);
    m = (v > m) | (v != v) ? v : m;
  }
  if (i < n) {
    const F8 v = load_tail(x + i, n - i, x[0]);
    m = (v > m) | (v != v) ? v : m;
  }
  float best = m[0];
  for (int k = 1; k < kLanes; ++k) best = (m[k] > best || m[k] != m[k]) ? m[k] : best;
  return best;
}

float lane_sum(F8 v) {
  float s = 0;
  for (int k = 0; k < kLanes; ++k) s += v[k];
  return s;
}

// x, y: (n). y may alias x.
void softmax_row(float* y, const float* x, int64_t n, bool log) {
  const float m = row_max(x, n);  // NaN propagates
  const int64_t whole = n - n % kLanes;
  F8 sum = splat(0.0f);
  if (log) {
    for (int64_t i = 0; i < whole; i += kLanes) sum += exp_lanes(load(x + i) - splat(m));
    if (whole < n) sum += exp_lanes(load_tail(x + whole, n - whole, -INFINITY) - splat(m));
    // (x - m) - log(sum), not x - (m + log(sum)): x - m is exact near the max, while m + log(sum)
    // would round at the magnitude of m and lose digits when the inputs are large.
    const float log_sum = std::log(lane_sum(sum));
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
    return;
  }
  for (int64_t i = 0; i < whole; i += kLanes) {
    const F8 e = exp_lanes(load(x + i) - splat(m));
    store(y + i, e);
    sum += e;
  }
  if (whole < n) {
    const F8 e = exp_lanes(load_tail(x + whole, n - whole, -INFINITY) - splat(m));  // -inf: e = 0 in the padding
    for (int64_t k = 0; k < n - whole; ++k) y[whole + k] = e[k];
    sum += e;
  }
  const float inv = 1.0f / lane_sum(sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// float64: x, y: (n). y may alias x.
void softmax_row(double* y, const double* x, int64_t n, bool log) {
  double m = x[0];
  for (int64_t i = 1; i < n; ++i) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;  // NaN propagates
  double sum = 0;
  if (log) {
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - m);
    const double log_sum = std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = std::exp(x[i] - m);
      sum += y[i];
    }
    const double inv = 1.0 / sum;
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
  MT_DISPATCH_FLOAT_AND_LOWP(in.dtype(), name, [&]<typename T>() {
    const T* x = cpu::data<const T>(in);
    T* y = cpu::data<T>(out);
    // Rows are independent: chunks of whole rows, with an exp per element (Note [Fixed chunks]).
    parallel_for(rows, cpu::kGrainTranscendental / n, [=](int64_t lo, int64_t hi) {
      if constexpr (std::is_same_v<T, compute_t<T>>) {
        for (int64_t r = lo; r < hi; ++r) softmax_row(y + r * n, x + r * n, n, log);
      } else {
        std::vector<float> row(static_cast<size_t>(n));  // one row in float32
        for (int64_t r = lo; r < hi; ++r) {
          std::copy_n(x + r * n, n, row.data());
          softmax_row(row.data(), row.data(), n, log);
          std::copy_n(row.data(), n, y + r * n);  // rounds once
        }
      }
    });
  });
}

}  // namespace mt
