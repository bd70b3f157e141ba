// CpuBackend::argsort: std::stable_sort of an index list per row, with a comparison that puts NaN
// after every number (Note [NaN sorts last]). For topk's first k of n, std::partial_sort in
// O(n log k), which is not stable, so its comparison also breaks ties by position: a total order,
// whose first k are the stable order's.
// Rows split across the intra-op threads; each row's result depends on that row alone, so the
// thread count changes nothing.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

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
  MT_CHECK(x.dim() == 2 && is_dense(x) && indices.dim() == 2 && indices.size(0) == x.size(0) &&
               indices.size(1) <= x.size(1) && indices.dtype() == kInt64 && is_dense(indices),
           "argsort: CPU kernel needs x (rows, n) and int64 indices (rows, k <= n), both contiguous; got ", x.sizes(),
           " and ", indices.sizes());
  const int64_t rows = x.size(0), n = x.size(1), k = indices.size(1);
  MT_DISPATCH_ALL_AND_LOWP(x.dtype(), "argsort", [&]<typename T>() {
    const T* in = static_cast<const T*>(x.raw_data());
    int64_t* out = static_cast<int64_t*>(indices.raw_data());
    parallel_for(rows, std::max<int64_t>(1, cpu::kGrainWork / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> idx(n);
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = in + r * n;
        // a before b by value alone (reversed when descending), or by value then position
        // 16-bit values compare as the float32 values they hold (exactly).
        const auto by_value = [row, descending](int64_t a, int64_t b) {
          using C = compute_t<T>;
          return descending ? sorts_before<C>(row[b], row[a]) : sorts_before<C>(row[a], row[b]);
        };
        const auto total = [&by_value](int64_t a, int64_t b) { return by_value(a, b) || (!by_value(b, a) && a < b); };
        std::iota(idx.begin(), idx.end(), int64_t{0});
        if (k == n) std::stable_sort(idx.begin(), idx.end(), by_value);
        else std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), total);
        std::copy(idx.begin(), idx.begin() + k, out + r * k);
      }
    });
  });
}

}  // namespace mt
