// DType: the element types a tensor can hold, their sizes and names, and MT_DISPATCH_* to turn a
// runtime dtype into a compile-time C++ type inside kernels.
// float32 is the training type everywhere; float64 exists for gradcheck; int64 for labels and indices;
// bfloat16 and float16 are the low-precision dtypes: stored in 16 bits, computed in float32 (Note
// [Low-precision compute type]), on the CPU and on CUDA alike. docs/gpu.md ("bfloat16 and float16
// on the GPU") lists the CUDA kernels that take them; the others refuse them in one line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "tensor/check.h"
#include "tensor/half.h"

namespace mt {

enum class DType : uint8_t { Float32, Float64, Int64, BFloat16, Float16 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kFloat16 = DType::Float16;

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t != DType::Int64; }
// The 16-bit floating dtypes, stored narrow and computed in float32.
constexpr bool is_low_precision(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

const char* dtype_name(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// The C++ type of each dtype, and back.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };

// Note [Low-precision compute type]: a bfloat16 or float16 tensor is *stored* in 16 bits and
// *computed* in float32, as PyTorch's CPU kernels do (its opmath_type): a kernel reads an element
// as compute_t<T>, does the op in float32 and rounds the result once, on the store. Sums (reductions
// and GEMM) accumulate in float32 and round once per output element. So an op on bfloat16 gives the
// float32 result rounded to bfloat16, never an error compounded by rounding at every step; what is
// lost is the inputs' precision, not the arithmetic's. For float, double and int64 compute_t<T> is T.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<BFloat16> { using type = float; };
template <> struct compute_type<Half> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

// Result type of a binary op on two dtypes, PyTorch's promotion for tensors of equal rank category:
// float64 > float32 > bfloat16, float16 > int64, and bfloat16 with float16 gives float32 (neither
// holds the other's values: bfloat16 has the range, float16 the precision).
constexpr DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
  if (is_low_precision(a) && is_low_precision(b)) return DType::Float32;
  return is_low_precision(a) ? a : b;
}

}  // namespace mt

// MT_DISPATCH_ALL(dtype, "op", [&]<typename T>() { ... }) calls the lambda with T = float, double or int64_t.
#define MT_DISPATCH_ALL(DT, OPNAME, ...)                                            \
  [&] {                                                                             \
    auto&& fn__ = __VA_ARGS__;                                                      \
    switch (DT) {                                                                   \
      case ::mt::DType::Float32: return fn__.template operator()<float>();          \
      case ::mt::DType::Float64: return fn__.template operator()<double>();         \
      case ::mt::DType::Int64: return fn__.template operator()<int64_t>();          \
      default: MT_FAIL(OPNAME, ": no ", DT, " kernel yet; cast with .to(kFloat32)"); \
    }                                                                               \
  }()

// MT_DISPATCH_ALL_AND_LOWP: MT_DISPATCH_ALL plus T = mt::BFloat16 and mt::Half, for the kernels that
// compute low-precision tensors in compute_t<T> (Note [Low-precision compute type]).
#define MT_DISPATCH_ALL_AND_LOWP(DT, OPNAME, ...)                                   \
  [&] {                                                                             \
    auto&& fn__ = __VA_ARGS__;                                                      \
    switch (DT) {                                                                   \
      case ::mt::DType::Float32: return fn__.template operator()<float>();          \
      case ::mt::DType::Float64: return fn__.template operator()<double>();         \
      case ::mt::DType::Int64: return fn__.template operator()<int64_t>();          \
      case ::mt::DType::BFloat16: return fn__.template operator()<::mt::BFloat16>(); \
      case ::mt::DType::Float16: return fn__.template operator()<::mt::Half>();     \
    }                                                                               \
    MT_FAIL(OPNAME, ": unknown dtype");                                             \
  }()

// MT_DISPATCH_FLOAT: float and double only (exp, log, softmax, ...).
#define MT_DISPATCH_FLOAT(DT, OPNAME, ...)                                          \
  [&] {                                                                             \
    auto&& fn__ = __VA_ARGS__;                                                      \
    switch (DT) {                                                                   \
      case ::mt::DType::Float32: return fn__.template operator()<float>();          \
      case ::mt::DType::Float64: return fn__.template operator()<double>();         \
      case ::mt::DType::BFloat16:                                                   \
      case ::mt::DType::Float16:                                                    \
        MT_FAIL(OPNAME, ": no ", DT, " kernel yet; cast with .to(kFloat32)");      \
      default: MT_FAIL(OPNAME, ": needs a floating dtype, got ", DT);               \
    }                                                                               \
  }()

// MT_DISPATCH_FLOAT_AND_LOWP: MT_DISPATCH_FLOAT plus T = mt::BFloat16 and mt::Half.
#define MT_DISPATCH_FLOAT_AND_LOWP(DT, OPNAME, ...)                                 \
  [&] {                                                                             \
    auto&& fn__ = __VA_ARGS__;                                                      \
    switch (DT) {                                                                   \
      case ::mt::DType::Float32: return fn__.template operator()<float>();          \
      case ::mt::DType::Float64: return fn__.template operator()<double>();         \
      case ::mt::DType::BFloat16: return fn__.template operator()<::mt::BFloat16>(); \
      case ::mt::DType::Float16: return fn__.template operator()<::mt::Half>();     \
      default: MT_FAIL(OPNAME, ": needs a floating dtype, got ", DT);               \
    }                                                                               \
  }()
