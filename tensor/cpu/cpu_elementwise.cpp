// CpuBackend::unary, ::binary and ::where: the elementwise math. Each op is a lambda handed to the
// loops in tensor/cpu/elementwise.h; the switch on the op runs once per call, outside the loop.
// bfloat16 and float16 compute in float32 and round once per element (Note [Low-precision compute
// type], tensor/dtype.h), as PyTorch's CPU kernels do, so their results are PyTorch's bits.
// Broadcasting and dtype promotion already happened in raw_ops.cpp: here every operand has out's
// shape (stride 0 where broadcast) and, except where's condition, out's dtype.
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cpu/elementwise.h"
#include "tensor/cpu/vec_exp.h"

namespace mt {

namespace {

// Float32 exp and sigmoid over contiguous tensors in 8-lane vectors (Note [Vectorised float exp]);
// false for anything else, which takes the libm loop below. sigmoid = 1/(1 + e^-x): e^-x is inf
// below -88.7 (1/inf = 0) and 0 above 104 (1/1 = 1), the limits float32 rounds to.
bool vector_unary_f32(UnaryOp op, const Tensor& out, const Tensor& in) {
  if ((op != UnaryOp::Exp && op != UnaryOp::Sigmoid) || out.dtype() != DType::Float32 ||
      !cpu::is_contiguous(out) || !cpu::is_contiguous(in))
    return false;
  using namespace cpu::vec;
  const float* x = cpu::data<const float>(in);
  float* y = cpu::data<float>(out);
  const bool sigmoid = op == UnaryOp::Sigmoid;
  auto f = [sigmoid](F8 v) { return sigmoid ? splat(1.0f) / (splat(1.0f) + exp_lanes(-v)) : exp_lanes(v); };
  // Chunks are whole vectors except the last; about a nanosecond per element.
  parallel_for(out.numel(), cpu::kGrainElementwise / 4, [=](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes) store(y + i, f(load(x + i)));
    if (i < hi) store_tail(y + i, f(load_tail(x + i, hi - i, 0.0f)), hi - i);
  });
  return true;
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) {
  if (vector_unary_f32(op, out, in)) return;
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), op_name(op), [&]<typename T>() {
    // The lambdas below compute in C (Note [Low-precision compute type]); the loop widens each
    // element to C and rounds the result to T once. For float, double and int64, C is T.
    using C = compute_t<T>;
    auto map = [&](auto f, int64_t grain = cpu::kGrainElementwise) {
      cpu::map_unary<T, T>(out, in, [f](T x) { return T(f(C(x))); }, grain);
    };
    constexpr int64_t costly = cpu::kGrainTranscendental;  // a libm call per element splits sooner
    // The scalar is rounded to T first, as PyTorch 1.13 does with a number next to a tensor
    // (bfloat16 x * 0.3 multiplies by 0.30078125): results are its bits.
    const C s = static_cast<C>(static_cast<T>(scalar));

    if constexpr (std::is_floating_point_v<C>) {
      switch (op) {
        case UnaryOp::Exp: return map([](C x) { return std::exp(x); }, costly);
        case UnaryOp::Log: return map([](C x) { return std::log(x); }, costly);
        case UnaryOp::Sqrt: return map([](C x) { return std::sqrt(x); });
        case UnaryOp::Tanh: return map([](C x) { return std::tanh(x); }, costly);
        case UnaryOp::Sigmoid: return map([](C x) { return C(1) / (C(1) + std::exp(-x)); }, costly);
        case UnaryOp::Erf: return map([](C x) { return std::erf(x); }, costly);
        case UnaryOp::Expm1: return map([](C x) { return std::expm1(x); }, costly);
        case UnaryOp::Log1p: return map([](C x) { return std::log1p(x); }, costly);
        // The exponents training uses are special-cased: x*x is exact and an order of magnitude
        // faster than std::pow, and MSE and norms square on every step.
        case UnaryOp::Pow:
          if (scalar == 2.0) return map([](C x) { return x * x; });
          if (scalar == 0.5) return map([](C x) { return std::sqrt(x); });
          return map([s](C x) { return std::pow(x, s); }, costly);
        default: break;
      }
    } else {
      switch (op) {
        case UnaryOp::Exp: case UnaryOp::Log: case UnaryOp::Sqrt:
        case UnaryOp::Tanh: case UnaryOp::Sigmoid: case UnaryOp::Erf: case UnaryOp::Expm1: case UnaryOp::Log1p:
          MT_FAIL(op_name(op), ": needs a floating dtype, got ", out.dtype());
        // Integer powers are computed in double and truncated; raw_ops promotes to floating
        // first when the exponent is not a small whole number.
        case UnaryOp::Pow:
          return map([scalar](C x) { return static_cast<C>(std::pow(static_cast<double>(x), scalar)); });
        default: break;
      }
    }

    switch (op) {
      case UnaryOp::Neg: return map([](C x) { return C(-x); });
      // x < 0 ? 0 : x rather than max(x, 0): a NaN input stays NaN, as in PyTorch.
      case UnaryOp::Relu: return map([](C x) { return x < C(0) ? C(0) : x; });
      case UnaryOp::Abs: return map([](C x) { return C(std::abs(x)); });
      case UnaryOp::Sign: return map([](C x) { return C((C(0) < x) - (x < C(0))); });
      case UnaryOp::AddScalar: return map([s](C x) { return C(x + s); });
      case UnaryOp::MulScalar: return map([s](C x) { return C(x * s); });
      default: MT_FAIL(op_name(op), ": not implemented on CPU for ", out.dtype());
    }
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), op_name(op), [&]<typename T>() {
    using C = compute_t<T>;  // as in unary: compute in C, round to T once
    auto map = [&](auto f) { cpu::map_binary<T>(out, a, b, [f](T x, T y) { return T(f(C(x), C(y))); }); };
    switch (op) {
      case BinaryOp::Add: return map([](C x, C y) { return C(x + y); });
      case BinaryOp::Sub: return map([](C x, C y) { return C(x - y); });
      case BinaryOp::Mul: return map([](C x, C y) { return C(x * y); });
      case BinaryOp::Div:
        if constexpr (std::is_integral_v<C>) {
          // Integer division truncates (C++ and torch.div(rounding_mode="trunc")); a zero divisor
          // would kill the process with SIGFPE, so it becomes an error instead.
          return map([](C x, C y) {
            MT_CHECK(y != 0, "div: integer division by zero");
            return C(x / y);
          });
        } else {
          return map([](C x, C y) { return x / y; });
        }
      // NaN wins, as in PyTorch: "x != x" is the NaN test that still vectorises.
      case BinaryOp::Maximum: return map([](C x, C y) { return (x > y || x != x) ? x : y; });
      case BinaryOp::Minimum: return map([](C x, C y) { return (x < y || x != x) ? x : y; });
      case BinaryOp::Eq: return map([](C x, C y) { return C(x == y); });
      case BinaryOp::Ne: return map([](C x, C y) { return C(x != y); });
      case BinaryOp::Lt: return map([](C x, C y) { return C(x < y); });
      case BinaryOp::Le: return map([](C x, C y) { return C(x <= y); });
      case BinaryOp::Gt: return map([](C x, C y) { return C(x > y); });
      case BinaryOp::Ge: return map([](C x, C y) { return C(x >= y); });
    }
    MT_FAIL(op_name(op), ": not implemented on CPU");
  });
}

// out = cond != 0 ? a : b. cond may have any dtype (masks are often float 1/0 from comparisons).
void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "where", [&]<typename T>() {
    MT_DISPATCH_ALL_AND_LOWP(cond.dtype(), "where", [&]<typename C>() {
      T* o = cpu::data<T>(out);
      const C* c = cpu::data<const C>(cond);
      const T* x = cpu::data<const T>(a);
      const T* y = cpu::data<const T>(b);
      const int64_t n = out.numel();
      if (cpu::is_contiguous(out) && cpu::is_contiguous(cond)) {
        const bool a_dense = cpu::is_contiguous(a), b_dense = cpu::is_contiguous(b);
        if (a_dense && b_dense) {
          parallel_for(n, cpu::kGrainElementwise, [=](int64_t lo, int64_t hi) {
            T* const dst = o;  // Note [Loop pointers in locals] (tensor/cpu/elementwise.h)
            const C* const mask = c;
            const T *const src_a = x, *const src_b = y;
            for (int64_t i = lo; i < hi; ++i) dst[i] = mask[i] != C(0) ? src_a[i] : src_b[i];
          });
          return;
        }
        // One side a broadcast scalar: the masked gradients' where(mask, dy, 0) (autograd/functions/
        // elementwise.cpp, Note [Masked gradients]) and masked fills.
        if (a_dense && cpu::is_broadcast_scalar(b)) {
          const T y0 = *y;
          parallel_for(n, cpu::kGrainElementwise, [=](int64_t lo, int64_t hi) {
            T* const dst = o;  // Note [Loop pointers in locals] (tensor/cpu/elementwise.h)
            const C* const mask = c;
            const T* const src = x;
            const T scalar = y0;
            for (int64_t i = lo; i < hi; ++i) dst[i] = mask[i] != C(0) ? src[i] : scalar;
          });
          return;
        }
        if (b_dense && cpu::is_broadcast_scalar(a)) {
          const T x0 = *x;
          parallel_for(n, cpu::kGrainElementwise, [=](int64_t lo, int64_t hi) {
            T* const dst = o;  // Note [Loop pointers in locals] (tensor/cpu/elementwise.h)
            const C* const mask = c;
            const T* const src = y;
            const T scalar = x0;
            for (int64_t i = lo; i < hi; ++i) dst[i] = mask[i] != C(0) ? scalar : src[i];
          });
          return;
        }
      }
      cpu::parallel_strided_loop(
          cpu::kGrainElementwise, out.sizes(),
          [](int64_t n, const std::array<int64_t, 4>& s, T* o, const C* c, const T* x, const T* y) {
            for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] != C(0) ? x[i * s[2]] : y[i * s[3]];
          },
          cpu::Operand<T>{o, out.strides().begin()}, cpu::Operand<const C>{c, cond.strides().begin()},
          cpu::Operand<const T>{x, a.strides().begin()}, cpu::Operand<const T>{y, b.strides().begin()});
    });
  });
}

}  // namespace mt
