// CpuBackend::argsort: std::stable_sort of an index list per row, with a comparison that puts NaN
// after every number (Note [NaN sorts last]). Rows split across the intra-op threads; each row's
// result depends on that row alone, so the thread count changes nothing.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tensor/cpu/cpu_backend.h"

namespace mt {

namespace {

// Note [NaN sorts last]: PyTorch orders NaN above +inf (last ascending, first descending), and `<`
// alone would make the order undefined (NaN compares false both ways). So a < b here means: b is
// NaN and a is not, or both are numbers and a < b. Two NaNs tie, and ties keep their input order.
// The CUDA kernel (cuda_sort.cu) uses the same comparison.
template <typename T>
bool sorts_before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(b) && !std::isnan(a);
  }
  return a < b;
}

}  // namespace

void CpuBackend::argsort(const Tensor& indices, const Tensor& x, bool descending) {
  MT_CHECK(x.dim() == 2 && is_dense(x) && indices.sizes() == x.sizes() && indices.dtype() == kInt64 &&
               is_dense(indices),
           "argsort: CPU kernel needs x (rows, n) and int64 indices of its shape, both contiguous; got ", x.sizes(),
           " and ", indices.sizes());
  const int64_t rows = x.size(0), n = x.size(1);
  MT_DISPATCH_ALL(x.dtype(), "argsort", [&]<typename T>() {
    const T* in = static_cast<const T*>(x.raw_data());
    int64_t* out = static_cast<int64_t*>(indices.raw_data());
    parallel_for(rows, std::max<int64_t>(1, cpu::kGrainWork / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = in + r * n;
        int64_t* idx = out + r * n;
        std::iota(idx, idx + n, int64_t{0});
        if (descending) {
          std::stable_sort(idx, idx + n, [row](int64_t a, int64_t b) { return sorts_before(row[b], row[a]); });
        } else {
          std::stable_sort(idx, idx + n, [row](int64_t a, int64_t b) { return sorts_before(row[a], row[b]); });
        }
      }
    });
  });
}

}  // namespace mt
