// CpuBackend::copy and ::fill: moving and casting elements between (possibly strided) tensors.
// copy is what contiguous(), .to(dtype), clone() and copy_ end in; it does not broadcast (raw_ops
// expands src to dst's shape first) and does not cross devices (to_device does that).
#include <algorithm>
#include <cstring>

#include "tensor/cpu/elementwise.h"

namespace mt {

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && cpu::is_contiguous(dst) && cpu::is_contiguous(src)) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.numel() * element_size(dst.dtype()));
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
      std::fill(p, p + dst.numel(), v);
      return;
    }
    cpu::strided_loop(
        dst.sizes(),
        [v](int64_t n, const std::array<int64_t, 1>& s, T* p) {
          for (int64_t i = 0; i < n; ++i) p[i * s[0]] = v;
        },
        cpu::operand<T>(dst));
  });
}

}  // namespace mt
