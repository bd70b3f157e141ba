// CpuBackend::cumsum: running sums along the middle dim of (outer, n, inner), one pass, left to right
// (right to left when reverse) as PyTorch's CPU loop adds them. With inner > 1 the running row is a
// vector of `inner` sums, advanced a whole row at a time, so the inner loop is a contiguous,
// vectorised add; with inner = 1 it is a scalar chain per row, eight rows side by side. Outer slices are
// independent: chunks of them run on the intra-op threads (Note [Fixed chunks]).
// The running sums are compute_t<T>: float32 for bfloat16 and float16, each output rounded once
// (Note [Low-precision compute type]); a 16-bit running sum would stop growing at 256 ones.
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

constexpr int64_t kRows = 8;

// R contiguous rows of n (x, y: (R, n)), scanned together: y[r][i] = y[r][i ∓ 1] + x[r][i].
template <typename T, int64_t R>
void scan_rows(const T* x, T* y, int64_t n, bool reverse) {
  using C = compute_t<T>;
  C run[R] = {};
  for (int64_t step = 0; step < n; ++step) {
    const int64_t i = reverse ? n - 1 - step : step;
    for (int64_t r = 0; r < R; ++r) y[r * n + i] = T(run[r] = run[r] + C(x[r * n + i]));
  }
}

}  // namespace

void CpuBackend::cumsum(const Tensor& out, const Tensor& in, bool reverse) {
  MT_CHECK(cpu::is_contiguous(in) && cpu::is_contiguous(out) && in.dim() == 3 && in.sizes() == out.sizes(),
           "cumsum: CPU kernel needs contiguous (outer, n, inner) in and out of one shape, got ", in.sizes(), " and ",
           out.sizes());
  const int64_t outer = in.size(0), n = in.size(1), inner = in.size(2);
  if (in.numel() == 0) return;
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), "cumsum", [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = cpu::data<const T>(in);
    T* y = cpu::data<T>(out);
    parallel_for(outer, std::max<int64_t>(1, cpu::kGrainElementwise / (n * inner)), [=](int64_t lo, int64_t hi) {
      if (inner == 1) {  // rows: kRows chains side by side, so each add does not wait on the last
        int64_t o = lo;
        for (; o + kRows <= hi; o += kRows) scan_rows<T, kRows>(x + o * n, y + o * n, n, reverse);
        for (; o < hi; ++o) scan_rows<T, 1>(x + o * n, y + o * n, n, reverse);
        return;
      }
      std::vector<C> run;  // 16-bit: the running row in float32 (T's own rows are the running row otherwise)
      if constexpr (!std::is_same_v<C, T>) run.resize(static_cast<size_t>(inner));
      for (int64_t o = lo; o < hi; ++o) {
        const T* xs = x + o * n * inner;
        T* ys = y + o * n * inner;
        for (int64_t step = 0; step < n; ++step) {
          const int64_t i = reverse ? n - 1 - step : step;
          const T* xi = xs + i * inner;
          T* yi = ys + i * inner;
          if constexpr (!std::is_same_v<C, T>) {
            for (int64_t j = 0; j < inner; ++j) yi[j] = T(run[j] = (step == 0 ? C(0) : run[j]) + C(xi[j]));
          } else if (step == 0) {
            for (int64_t j = 0; j < inner; ++j) yi[j] = xi[j];
          } else {
            const T* prev = yi + (reverse ? inner : -inner);
            for (int64_t j = 0; j < inner; ++j) yi[j] = prev[j] + xi[j];
          }
        }
      }
    });
  });
}

}  // namespace mt
