// DType: the element types a tensor can hold, their sizes and names, and MT_DISPATCH_* to turn a
// runtime dtype into a compile-time C++ type inside kernels.
// float32 is the training type everywhere; float64 exists for gradcheck; int64 for labels and indices.
// float16 is a storage format on the CPU (cast to and from float32 only; DDP's fp16 compression);
// bfloat16 has an enum slot so that the CUDA backend can add it without changing this file's users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "tensor/check.h"

namespace mt {

enum class DType : uint8_t { Float32, Float64, Int64, BFloat16, Float16 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;

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

const char* dtype_name(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// The C++ type of each dtype, and back.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
// float16 elements are read and written as their raw bits (tensor/half.h converts them).
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::Float16; };

// Result type of a binary op on two dtypes (float64 > float32 > int64), like PyTorch's promotion
// for tensors of equal rank category.
constexpr DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
  return a;
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
      default: MT_FAIL(OPNAME, ": dtype ", DT, " is not supported on CPU");         \
    }                                                                               \
  }()

// MT_DISPATCH_FLOAT: float and double only (exp, log, softmax, ...).
#define MT_DISPATCH_FLOAT(DT, OPNAME, ...)                                          \
  [&] {                                                                             \
    auto&& fn__ = __VA_ARGS__;                                                      \
    switch (DT) {                                                                   \
      case ::mt::DType::Float32: return fn__.template operator()<float>();          \
      case ::mt::DType::Float64: return fn__.template operator()<double>();         \
      default: MT_FAIL(OPNAME, ": needs a floating dtype, got ", DT);               \
    }                                                                               \
  }()
