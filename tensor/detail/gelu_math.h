// GELU and its derivative for one value, for the CUDA kernel (tensor/cuda/cuda_gelu.cu), and the
// constants the CPU kernel (tensor/cpu/cpu_gelu.cpp, which evaluates the same formulas as Eigen
// array expressions, vectorised) shares with it. Each function's comment gives its formula.
// float calls the C library's float functions (erfcf, expf, tanhf), which exist
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
MT_HOST_DEVICE inline T erfc_of(T x) {
  if constexpr (std::is_same_v<T, float>) return erfcf(x); else return erfc(x);
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

// Note [GELU's negative tail]: Φ(x) = 0.5·(1 + erf(x/√2)) loses its digits as x goes negative:
// erf(x/√2) is -1 plus a little, and 1 + erf keeps only that little, less erf's rounding near -1
// (in float32 an ulp of 1 is 6e-8, and Φ(-5) is 2.9e-7: GELU(-5.17) came out -4.6e-7 for -6.0e-7).
// erfc(-x/√2) is the same 1 + erf(x/√2), computed without the cancellation, to a few ulp of itself,
// so both GELU and its gradient here use Φ(x) = 0.5·erfc(-x/√2). The CPU kernel keeps Eigen's
// vectorised erf for x >= kGeluErfTail and calls these below it: erfcf is one value at a time
// (27 ns), so a cut at -2 made GELU of N(0, 1) values 1.8x slower, and at -3 (0.1% of them) costs
// nothing measurable. Above it the float32 error stays within 1.5x PyTorch's (4e-7 at worst, in
// [-3, -2)); below it, it fell from 9e-7 to 1e-10 (x in [-6, -4), against float64).
constexpr double kGeluErfTail = -3.0;

// x·Φ(x) = 0.5·x·erfc(-x/√2)   (= 0.5·x·(1 + erf(x/√2)))
template <typename T>
MT_HOST_DEVICE inline T gelu_erf(T x) {
  using namespace gelu_detail;
  return T(0.5) * x * erfc_of(-x * T(kInvSqrt2));
}

// Φ(x) + x·φ(x) = 0.5·erfc(-x/√2) + x·e^{-x²/2}/√(2π)
template <typename T>
MT_HOST_DEVICE inline T gelu_erf_grad(T x) {
  using namespace gelu_detail;
  const T cdf = T(0.5) * erfc_of(-x * T(kInvSqrt2));
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
