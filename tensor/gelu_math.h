// GELU and its derivative for one value, for the CUDA kernel (tensor/cuda/cuda_gelu.cu), and the
// constants the CPU kernel (tensor/cpu/cpu_gelu.cpp, which evaluates the same formulas as Eigen
// array expressions, vectorised) shares with it. Each function's comment gives its formula.
// float calls the C library's float functions (erff, expf, tanhf), which exist
// both on the host and in CUDA device code, so float stays float on both.
#pragma once

#include <cmath>
#include <type_traits>

#include "tensor/host_device.h"

namespace mt {

namespace gelu_detail {
template <typename T>
MT_HOST_DEVICE inline T erf_of(T x) {
  if constexpr (std::is_same_v<T, float>) return erff(x); else return erf(x);
}
template <typename T>
MT_HOST_DEVICE inline T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return expf(x); else return exp(x);
}
template <typename T>
MT_HOST_DEVICE inline T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>) return tanhf(x); else return tanh(x);
}
constexpr double kInvSqrt2 = 0.70710678118654752440;    // 1/√2
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
constexpr double kCubic = 0.044715;
}  // namespace gelu_detail

// x·Φ(x) = 0.5·x·(1 + erf(x/√2))
template <typename T>
MT_HOST_DEVICE inline T gelu_erf(T x) {
  using namespace gelu_detail;
  return T(0.5) * x * (T(1) + erf_of(x * T(kInvSqrt2)));
}

// Φ(x) + x·φ(x)
template <typename T>
MT_HOST_DEVICE inline T gelu_erf_grad(T x) {
  using namespace gelu_detail;
  const T cdf = T(0.5) * (T(1) + erf_of(x * T(kInvSqrt2)));
  return cdf + x * T(kInvSqrt2Pi) * exp_of(T(-0.5) * x * x);
}

// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
template <typename T>
MT_HOST_DEVICE inline T gelu_tanh(T x) {
  using namespace gelu_detail;
  const T t = tanh_of(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x));
  return T(0.5) * x * (T(1) + t);
}

// 0.5·(1 + t) + 0.5·x·(1 - t²)·√(2/π)·(1 + 3·0.044715·x²)
template <typename T>
MT_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  using namespace gelu_detail;
  const T t = tanh_of(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
}

}  // namespace mt
