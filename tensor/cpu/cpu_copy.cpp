// CpuBackend::copy and ::fill: moving and casting elements between (possibly strided) tensors.
// copy is what contiguous(), .to(dtype), clone() and copy_ end in; it does not broadcast (raw_ops
// expands src to dst's shape first) and does not cross devices (to_device does that). float16 only
// casts to and from float32 here (DDP's fp16 compression); the CPU has no float16 arithmetic.
#include <algorithm>
#include <cstring>

#include "tensor/cpu/elementwise.h"
#include "tensor/half.h"

namespace mt {

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && cpu::is_contiguous(dst) && cpu::is_contiguous(src)) {
    char* to = static_cast<char*>(dst.raw_data());
    const char* from = static_cast<const char*>(src.raw_data());
    const int64_t size = element_size(dst.dtype());
    parallel_for(dst.numel(), cpu::kGrainElementwise, [=](int64_t lo, int64_t hi) {
      std::memcpy(to + lo * size, from + lo * size, (hi - lo) * size);
    });
    return;
  }
  // float16 is a storage format only (tensor/half.h): it can be cast to and from float32.
  if (dst.dtype() == DType::Float16 || src.dtype() == DType::Float16) {
    MT_CHECK((dst.dtype() == DType::Float16 && src.dtype() == DType::Float32) ||
                 (dst.dtype() == DType::Float32 && src.dtype() == DType::Float16),
             "copy: on the CPU float16 only casts to and from float32, not ", src.dtype(), " to ", dst.dtype());
    if (dst.dtype() == DType::Float16)
      cpu::map_unary<uint16_t, float>(dst, src, [](float x) { return float_to_half(x); });
    else
      cpu::map_unary<float, uint16_t>(dst, src, [](uint16_t h) { return half_to_float(h); });
    return;
  }
  MT_DISPATCH_ALL(dst.dtype(), "copy", [&]<typename TO>() {
    MT_DISPATCH_ALL(src.dtype(), "copy", [&]<typename TI>() {
      cpu::map_unary<TO, TI>(dst, src, [](TI x) { return static_cast<TO>(x); });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  MT_DISPATCH_ALL(dst.dtype(), "fill", [&]<typename T>() {
    const T v = static_cast<T>(value);
    T* p = cpu::data<T>(dst);
    if (cpu::is_contiguous(dst)) {
      parallel_for(dst.numel(), cpu::kGrainElementwise, [=](int64_t lo, int64_t hi) { std::fill(p + lo, p + hi, v); });
      return;
    }
    cpu::parallel_strided_loop(
        cpu::kGrainElementwise, dst.sizes(),
        [v](int64_t n, const std::array<int64_t, 1>& s, T* p) {
          for (int64_t i = 0; i < n; ++i) p[i * s[0]] = v;
        },
        cpu::operand<T>(dst));
  });
}

}  // namespace mt
