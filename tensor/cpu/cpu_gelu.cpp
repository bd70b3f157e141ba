// CpuBackend::gelu and gelu_backward: GELU in one pass instead of the five or six elementwise ops of
// its composition (mt::reference::gelu in autograd/detail/reference_ops.h; tests compare the two).
//   exact: y = x·Φ(x) = 0.5·x·(1 + erf(x/√2))          y' = Φ(x) + x·φ(x),  φ(x) = e^{-x²/2}/√(2π)
//   tanh:  y = 0.5·x·(1 + t),  t = tanh(u),  u = √(2/π)·(x + 0.044715·x³)
//          y' = 0.5·(1 + t) + 0.5·x·(1 - t²)·√(2/π)·(1 + 3·0.044715·x²)
// Written as Eigen array expressions: erf, exp and tanh are then vectorised for float32 (erf by
// Eigen's rational approximation, accurate to a couple of ulp), where the C library's erff is one
// value at a time and would cost more than the whole composition. float64 calls std::erf per value.
// Below x = -3 the exact form is redone one value at a time with erfc, which keeps the digits that
// 1 + erf cancels there (Note [GELU's negative tail], tensor/detail/gelu_math.h).
// Both run on the intra-op threads in fixed chunks (Note [Fixed chunks], tensor/parallel.h).
// The CUDA kernel (tensor/cuda/cuda_gelu.cu) evaluates the same formulas through tensor/detail/gelu_math.h.
// bfloat16 and float16 run the float32 code on blocks widened on the stack, rounded once (in_float32).
#include <algorithm>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_core.h"
#include "tensor/detail/gelu_math.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <unsupported/Eigen/SpecialFunctions>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace mt {
namespace {

using gelu_detail::kCubic;
using gelu_detail::kInvSqrt2;
using gelu_detail::kInvSqrt2Pi;
using gelu_detail::kSqrt2OverPi;

template <typename T>
using Array = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(cpu::is_contiguous(a) && cpu::is_contiguous(b) && a.sizes() == b.sizes(), op,
           ": CPU kernel needs contiguous tensors of one shape, got ", a.sizes(), " and ", b.sizes());
}

// Calls redo(i) for each i in [0, n) with x[i] < kGeluErfTail (Note [GELU's negative tail]).
// Blocks are screened by a vectorised minimum first: a scalar compare of every value was half of
// GELU's forward time on the GPT step (perf), though almost no value is below the tail. A NaN is
// never below the tail and the minimum skips NaNs, so the values redone are the same as a plain
// scan's.
template <typename T, typename Redo>
void for_tail(const T* x, int64_t n, Redo&& redo) {
  constexpr int64_t kBlock = 256;
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t m = std::min(kBlock, n - first);
    if (!(ConstArray<T>(x + first, m).template minCoeff<Eigen::PropagateNumbers>() < T(kGeluErfTail))) continue;
    for (int64_t i = first; i < first + m; ++i)
      if (x[i] < T(kGeluErfTail)) redo(i);
  }
}

// y = GELU(x) over n values of a floating type T.
template <typename T>
void gelu_span(T* out, const T* in, int64_t n, GeluApproximate approximate) {
  const ConstArray<T> xs(in, n);
  Array<T> y(out, n);
  if (approximate == GeluApproximate::Tanh) {
    y = T(0.5) * xs * (T(1) + (T(kSqrt2OverPi) * (xs + T(kCubic) * xs.cube())).tanh());
  } else {
    y = T(0.5) * xs * (T(1) + (xs * T(kInvSqrt2)).erf());
    for_tail(in, n, [&](int64_t i) { y[i] = gelu_erf(xs[i]); });  // Note [GELU's negative tail]
  }
}

// dx = dy·GELU'(x) over n values.
template <typename T>
void gelu_grad_span(T* out, const T* dy, const T* in, int64_t n, GeluApproximate approximate) {
  const ConstArray<T> xs(in, n), g(dy, n);
  Array<T> d(out, n);
  if (approximate == GeluApproximate::Tanh) {
    const auto t = (T(kSqrt2OverPi) * (xs + T(kCubic) * xs.cube())).tanh().eval();
    d = g * (T(0.5) * (T(1) + t) +
             T(0.5) * xs * (T(1) - t.square()) * T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * xs.square()));
  } else {
    d = g * (T(0.5) * (T(1) + (xs * T(kInvSqrt2)).erf()) + xs * T(kInvSqrt2Pi) * (T(-0.5) * xs.square()).exp());
    for_tail(in, n, [&](int64_t i) { d[i] = g[i] * gelu_erf_grad(xs[i]); });  // Note [GELU's negative tail]
  }
}

// Runs f(out, a, b, n) on [lo, hi) of 16-bit tensors in float32: blocks of kWideBlock values widened
// on the stack, computed by the float32 code and rounded once (Note [Low-precision compute type]).
constexpr int64_t kWideBlock = 256;
template <typename T, typename F>
void in_float32(T* out, const T* a, const T* b, int64_t lo, int64_t hi, F&& f) {
  float wa[kWideBlock], wb[kWideBlock], wo[kWideBlock];
  for (int64_t first = lo; first < hi; first += kWideBlock) {
    const int64_t m = std::min(kWideBlock, hi - first);
    std::copy_n(a + first, m, wa);
    if (b) std::copy_n(b + first, m, wb);
    f(wo, wa, wb, m);
    std::copy_n(wo, m, out + first);
  }
}

}  // namespace

void CpuBackend::gelu(const Tensor& out, const Tensor& x, GeluApproximate approximate) {
  check_same("gelu", out, x);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "gelu", [&]<typename T>() {
    const T* in = cpu::data<const T>(x);
    T* y = cpu::data<T>(out);
    parallel_for(x.numel(), cpu::kGrainTranscendental, [&](int64_t lo, int64_t hi) {
      if constexpr (std::is_same_v<T, compute_t<T>>) {
        gelu_span(y + lo, in + lo, hi - lo, approximate);
      } else {
        const T* none = nullptr;  // one operand
        in_float32(y, in, none, lo, hi,
                   [&](float* o, const float* a, const float*, int64_t m) { gelu_span(o, a, m, approximate); });
      }
    });
  });
}

void CpuBackend::gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, GeluApproximate approximate) {
  check_same("gelu_backward", dx, x);
  check_same("gelu_backward", dy, x);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "gelu_backward", [&]<typename T>() {
    const T* in = cpu::data<const T>(x);
    const T* g = cpu::data<const T>(dy);
    T* d = cpu::data<T>(dx);
    parallel_for(x.numel(), cpu::kGrainTranscendental, [&](int64_t lo, int64_t hi) {
      if constexpr (std::is_same_v<T, compute_t<T>>) {
        gelu_grad_span(d + lo, g + lo, in + lo, hi - lo, approximate);
      } else {
        in_float32(d, g, in, lo, hi, [&](float* o, const float* ga, const float* xa, int64_t m) {
          gelu_grad_span(o, ga, xa, m, approximate);
        });
      }
    });
  });
}

}  // namespace mt
