// CudaBackend::gelu and gelu_backward: one grid-stride elementwise kernel each, with the formulas of
// tensor/detail/gelu_math.h (shared with the CPU backend, tensor/cpu/cpu_gelu.cpp). raw_ops hands over
// contiguous tensors of one shape. bfloat16 and float16 elements are computed in float32 and rounded
// once (Note [Low-precision compute type], tensor/dtype.h).
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"
#include "tensor/detail/gelu_math.h"

namespace mt::cuda {
namespace {

// y[i] = GELU(x[i])      x, y: (n)
template <typename T>
__global__ void gelu_kernel(T* y, const T* x, int64_t n, bool tanh_form) {
  using C = compute_t<T>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const C v = x[i];
    y[i] = T(tanh_form ? gelu_tanh(v) : gelu_erf(v));
  }
}

// dx[i] = dy[i]·GELU'(x[i])      dx, dy, x: (n)
template <typename T>
__global__ void gelu_backward_kernel(T* dx, const T* dy, const T* x, int64_t n, bool tanh_form) {
  using C = compute_t<T>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const C v = x[i];
    dx[i] = T(C(dy[i]) * (tanh_form ? gelu_tanh_grad(v) : gelu_erf_grad(v)));
  }
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(is_dense(a) && is_dense(b) && a.sizes() == b.sizes(), op,
           ": CUDA kernel needs contiguous tensors of one shape, got ", a.sizes(), " and ", b.sizes());
}

}  // namespace

void CudaBackend::gelu(const Tensor& out, const Tensor& x, GeluApproximate approximate) {
  check_same("gelu", out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "gelu", [&]<typename T>() {
    const auto g = elementwise_geometry(n, multiprocessors_);
    gelu_kernel<T><<<g.blocks, g.threads, 0, stream_>>>(static_cast<T*>(out.raw_data()),
                                                        static_cast<const T*>(x.raw_data()), n,
                                                        approximate == GeluApproximate::Tanh);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, GeluApproximate approximate) {
  check_same("gelu_backward", dx, x);
  check_same("gelu_backward", dy, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "gelu_backward", [&]<typename T>() {
    const auto g = elementwise_geometry(n, multiprocessors_);
    gelu_backward_kernel<T><<<g.blocks, g.threads, 0, stream_>>>(
        static_cast<T*>(dx.raw_data()), static_cast<const T*>(dy.raw_data()), static_cast<const T*>(x.raw_data()), n,
        approximate == GeluApproximate::Tanh);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
