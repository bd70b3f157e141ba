// CudaBackend::unary, ::binary and ::where: the elementwise math as functor structs handed to the
// loops in cuda_loops.cuh. Each functor computes what the CPU backend's lambda of the same op does
// (tensor/cpu/cpu_elementwise.cpp), including NaN handling: relu(NaN) = NaN, maximum/minimum
// propagate NaN. Math functions are CUDA's (exp, log, tanh, erf, pow), accurate to a few ulps, so
// results match the CPU's within rounding, not bit for bit.
// bfloat16 and float16 compute in float32 and round once per element, as on the CPU (Note
// [Low-precision compute type], tensor/dtype.h): each functor below is written for the compute
// type C and wrapped in InCompute, which widens the 16-bit elements and rounds the result. The
// arithmetic, comparisons and the rounding are IEEE float32 on both sides, so those results are the
// CPU's bits; the math functions' few-ulp differences can move a 16-bit result by one ulp.
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_error.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

// f computed in compute_t<T>, its result rounded to T once; for float, double and int64 it is f.
template <typename T, typename F>
struct InCompute {
  using C = compute_t<T>;
  F f;
  __device__ T operator()(T x) const { return T(f(C(x))); }
  __device__ T operator()(T x, T y) const { return T(f(C(x), C(y))); }
};

// ---- unary ----------------------------------------------------------------------------------------
// With a scalar where the op has one. T is a compute type: float, double or int64_t (the float-only
// ops are only instantiated for float and double).
#define MT_UNARY_FUNCTOR(NAME, EXPR)                        \
  template <typename T>                                     \
  struct NAME {                                             \
    T s;                                                    \
    __device__ T operator()(T x) const { return EXPR; }    \
  };
MT_UNARY_FUNCTOR(Exp, exp(x))
MT_UNARY_FUNCTOR(Log, log(x))
MT_UNARY_FUNCTOR(Sqrt, sqrt(x))
MT_UNARY_FUNCTOR(Tanh, tanh(x))
MT_UNARY_FUNCTOR(Sigmoid, T(1) / (T(1) + exp(-x)))
MT_UNARY_FUNCTOR(Erf, erf(x))
MT_UNARY_FUNCTOR(Expm1, expm1(x))
MT_UNARY_FUNCTOR(Log1p, log1p(x))
MT_UNARY_FUNCTOR(Square, x * x)  // pow(x, 2): exact, and what MSE calls every step
MT_UNARY_FUNCTOR(PowFloat, pow(x, s))
MT_UNARY_FUNCTOR(Neg, T(-x))
MT_UNARY_FUNCTOR(Relu, x < T(0) ? T(0) : x)  // not max(x, 0): NaN stays NaN
MT_UNARY_FUNCTOR(Abs, x < T(0) ? T(-x) : x)
MT_UNARY_FUNCTOR(Sign, T((T(0) < x) - (x < T(0))))
MT_UNARY_FUNCTOR(AddScalar, T(x + s))
MT_UNARY_FUNCTOR(MulScalar, T(x * s))
#undef MT_UNARY_FUNCTOR

// Integer powers take the exponent as a double (pow(int, 0.5) is not an integer op).
template <typename T>
struct PowIntExact {
  double s;
  __device__ T operator()(T x) const { return static_cast<T>(pow(static_cast<double>(x), s)); }
};

// ---- binary ---------------------------------------------------------------------------------------
#define MT_BINARY_FUNCTOR(NAME, EXPR)                          \
  template <typename T>                                        \
  struct NAME {                                                \
    __device__ T operator()(T x, T y) const { return EXPR; }  \
  };
MT_BINARY_FUNCTOR(Add, T(x + y))
MT_BINARY_FUNCTOR(Sub, T(x - y))
MT_BINARY_FUNCTOR(Mul, T(x * y))
MT_BINARY_FUNCTOR(Maximum, (x > y || x != x) ? x : y)  // NaN wins, as in PyTorch
MT_BINARY_FUNCTOR(Minimum, (x < y || x != x) ? x : y)
MT_BINARY_FUNCTOR(Eq, T(x == y))
MT_BINARY_FUNCTOR(Ne, T(x != y))
MT_BINARY_FUNCTOR(Lt, T(x < y))
MT_BINARY_FUNCTOR(Le, T(x <= y))
MT_BINARY_FUNCTOR(Gt, T(x > y))
MT_BINARY_FUNCTOR(Ge, T(x >= y))
#undef MT_BINARY_FUNCTOR

template <typename T>
struct Div {
  __device__ T operator()(T x, T y) const { return x / y; }
};
// Integer division truncates like C++; a zero divisor cannot throw in a kernel, so it is reported
// through the device error slot (raised at the next synchronisation) and the quotient is 0.
template <>
struct Div<int64_t> {
  detail::DeviceErrorSlot* errors;
  __device__ int64_t operator()(int64_t x, int64_t y) const {
    if (y == 0) {
      detail::report_index_error(errors, detail::IndexOp::IntegerDivision, x, 0, 0);
      return 0;
    }
    return x / y;
  }
};

// ---- where ----------------------------------------------------------------------------------------
// Ix: StridedIndexer<4> in uint32_t or int64_t (Note [32-bit index math], indexer.h).
template <typename T, typename C, typename Ix>
__global__ void where_kernel(T* out, const C* cond, const T* a, const T* b, typename Ix::Index n, Ix ix) {
  using I = typename Ix::Index;
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    I off[4];
    ix.offsets(i, off);
    out[off[0]] = cond[off[1]] != C(0) ? a[off[2]] : b[off[3]];
  }
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) {
  if (out.numel() == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), op_name(op), [&]<typename T>() {
    using C = compute_t<T>;
    auto map = [&](auto f) { map_unary<T, T>(*this, out, in, InCompute<T, decltype(f)>{f}); };
    // The scalar is rounded to T first, as on the CPU (bfloat16 x * 0.3 multiplies by 0.30078125).
    const C s = static_cast<C>(static_cast<T>(scalar));
    if constexpr (std::is_floating_point_v<C>) {
      switch (op) {
        case UnaryOp::Exp: return map(Exp<C>{s});
        case UnaryOp::Log: return map(Log<C>{s});
        case UnaryOp::Sqrt: return map(Sqrt<C>{s});
        case UnaryOp::Tanh: return map(Tanh<C>{s});
        case UnaryOp::Sigmoid: return map(Sigmoid<C>{s});
        case UnaryOp::Erf: return map(Erf<C>{s});
        case UnaryOp::Expm1: return map(Expm1<C>{s});
        case UnaryOp::Log1p: return map(Log1p<C>{s});
        case UnaryOp::Pow:
          if (scalar == 2.0) return map(Square<C>{s});
          if (scalar == 0.5) return map(Sqrt<C>{s});
          return map(PowFloat<C>{s});
        default: break;
      }
    } else {
      switch (op) {
        case UnaryOp::Exp: case UnaryOp::Log: case UnaryOp::Sqrt:
        case UnaryOp::Tanh: case UnaryOp::Sigmoid: case UnaryOp::Erf: case UnaryOp::Expm1: case UnaryOp::Log1p:
          MT_FAIL(op_name(op), ": needs a floating dtype, got ", out.dtype());
        case UnaryOp::Pow: return map(PowIntExact<C>{scalar});
        default: break;
      }
    }
    switch (op) {
      case UnaryOp::Neg: return map(Neg<C>{s});
      case UnaryOp::Relu: return map(Relu<C>{s});
      case UnaryOp::Abs: return map(Abs<C>{s});
      case UnaryOp::Sign: return map(Sign<C>{s});
      case UnaryOp::AddScalar: return map(AddScalar<C>{s});
      case UnaryOp::MulScalar: return map(MulScalar<C>{s});
      default: MT_FAIL(op_name(op), ": not implemented on CUDA for ", out.dtype());
    }
  });
}

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), op_name(op), [&]<typename T>() {
    using C = compute_t<T>;
    auto map = [&](auto f) { map_binary<T>(*this, out, a, b, InCompute<T, decltype(f)>{f}); };
    switch (op) {
      case BinaryOp::Add: return map(Add<C>{});
      case BinaryOp::Sub: return map(Sub<C>{});
      case BinaryOp::Mul: return map(Mul<C>{});
      case BinaryOp::Div:
        if constexpr (std::is_same_v<C, int64_t>) return map(Div<C>{detail::device_error_slot()});
        else return map(Div<C>{});
      case BinaryOp::Maximum: return map(Maximum<C>{});
      case BinaryOp::Minimum: return map(Minimum<C>{});
      case BinaryOp::Eq: return map(Eq<C>{});
      case BinaryOp::Ne: return map(Ne<C>{});
      case BinaryOp::Lt: return map(Lt<C>{});
      case BinaryOp::Le: return map(Le<C>{});
      case BinaryOp::Gt: return map(Gt<C>{});
      case BinaryOp::Ge: return map(Ge<C>{});
    }
    MT_FAIL(op_name(op), ": not implemented on CUDA");
  });
}

// out = cond != 0 ? a : b; cond may have any dtype. One strided kernel: where is not on a hot path
// (masks in losses), and the indexer's one-run case costs no division.
void CudaBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "where", [&]<typename T>() {
    MT_DISPATCH_ALL_AND_LOWP(cond.dtype(), "where", [&]<typename C>() {
      const auto ix = make_indexer<4>(out.sizes(), {out.strides().begin(), cond.strides().begin(),
                                                    a.strides().begin(), b.strides().begin()});
      const auto g = elementwise_geometry(n, multiprocessors_);
      with_index_width(ix, n, [&](const auto& w) {
        using I = typename std::decay_t<decltype(w)>::Index;
        where_kernel<T, C><<<g.blocks, g.threads, 0, stream_>>>(
            static_cast<T*>(out.raw_data()), static_cast<const C*>(cond.raw_data()),
            static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()), static_cast<I>(n), w);
      });
      MT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace mt::cuda
