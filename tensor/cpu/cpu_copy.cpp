// CpuBackend::copy and ::fill: moving and casting elements between (possibly strided) tensors.
// copy is what contiguous(), .to(dtype), clone() and copy_ end in; it does not broadcast (raw_ops
// expands src to dst's shape first) and does not cross devices (to_device does that). Every dtype
// casts to every other; a cast from or to bfloat16 or float16 goes through float32 (tensor/half.h
// rounds to nearest even), as PyTorch's does.
#include <algorithm>
#include <cstring>

#include "tensor/cpu/elementwise.h"

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
  // Through the source's compute type: bfloat16 -> float64 is float -> double, exact; float64 ->
  // bfloat16 is double -> float -> bfloat16, two roundings, as in PyTorch (c10's BFloat16(float)).
  MT_DISPATCH_ALL_AND_LOWP(dst.dtype(), "copy", [&]<typename TO>() {
    MT_DISPATCH_ALL_AND_LOWP(src.dtype(), "copy", [&]<typename TI>() {
      cpu::map_unary<TO, TI>(dst, src, [](TI x) { return static_cast<TO>(static_cast<compute_t<TI>>(x)); });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  MT_DISPATCH_ALL_AND_LOWP(dst.dtype(), "fill", [&]<typename T>() {
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
