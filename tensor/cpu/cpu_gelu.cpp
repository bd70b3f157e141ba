// CpuBackend::gelu and gelu_backward: GELU in one pass instead of the five or six elementwise ops of
// its composition (autograd/reference_ops.h keeps that beside it; tests compare the two).
//   exact: y = x·Φ(x) = 0.5·x·(1 + erf(x/√2))          y' = Φ(x) + x·φ(x),  φ(x) = e^{-x²/2}/√(2π)
//   tanh:  y = 0.5·x·(1 + t),  t = tanh(u),  u = √(2/π)·(x + 0.044715·x³)
//          y' = 0.5·(1 + t) + 0.5·x·(1 - t²)·√(2/π)·(1 + 3·0.044715·x²)
// The same formulas are in the CUDA kernel (tensor/cuda/cuda_gelu.cu), through tensor/gelu_math.h.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/gelu_math.h"

namespace mt {
namespace {

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(cpu::is_contiguous(a) && cpu::is_contiguous(b) && a.sizes() == b.sizes(), op,
           ": CPU kernel needs contiguous tensors of one shape, got ", a.sizes(), " and ", b.sizes());
}

}  // namespace

void CpuBackend::gelu(const Tensor& out, const Tensor& x, GeluApproximate approximate) {
  check_same("gelu", out, x);
  const bool tanh = approximate == GeluApproximate::Tanh;
  MT_DISPATCH_FLOAT(x.dtype(), "gelu", [&]<typename T>() {
    const T* xs = cpu::data<const T>(x);
    T* y = cpu::data<T>(out);
    const int64_t n = x.numel();
    if (tanh) {
      for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(xs[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = gelu_erf(xs[i]);
    }
  });
}

void CpuBackend::gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, GeluApproximate approximate) {
  check_same("gelu_backward", dx, x);
  check_same("gelu_backward", dy, x);
  const bool tanh = approximate == GeluApproximate::Tanh;
  MT_DISPATCH_FLOAT(x.dtype(), "gelu_backward", [&]<typename T>() {
    const T* xs = cpu::data<const T>(x);
    const T* g = cpu::data<const T>(dy);
    T* d = cpu::data<T>(dx);
    const int64_t n = x.numel();
    if (tanh) {
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * gelu_tanh_grad(xs[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * gelu_erf_grad(xs[i]);
    }
  });
}

}  // namespace mt
