// CudaBackend::argsort by ranks: one thread per element counts the elements of its row that sort
// before it and writes its own index at that position. Ties are broken by input position, so the
// result is the stable order, the same as the CPU's std::stable_sort (tests/cuda/test_cuda_layers.cpp
// compares them); NaN sorts after every number (Note [NaN sorts last], tensor/cpu/cpu_sort.cpp).
//
// Note [Sort by rank]: each thread reads its whole row, so a row of n costs n² comparisons. That
// is fine for the rows models sort (top-k over classes or a vocabulary of a few thousand, a
// sequence's scores) and simple to check; a bitonic or radix sort would replace it for long rows.
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

// a < b with NaN (the one value unequal to itself) above every number; two NaNs tie.
template <typename T>
__device__ inline bool sorts_before(T a, T b) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan || b_nan) return b_nan && !a_nan;
  return a < b;
}

// x: (rows, n)  indices: (rows, k). indices[r, rank of x[r, i]] = i for the ranks below k.
template <typename T>
__global__ void argsort_rank_kernel(int64_t* indices, const T* x, int64_t rows, int64_t n, int64_t k,
                                    bool descending) {
  for (int64_t e = global_thread(); e < rows * n; e += grid_threads()) {
    const int64_t r = e / n, i = e % n;
    const T* row = x + r * n;
    const T xi = row[i];
    int64_t rank = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T xj = row[j];
      const bool before = descending ? sorts_before(xi, xj) : sorts_before(xj, xi);
      const bool tie = !sorts_before(xi, xj) && !sorts_before(xj, xi);
      rank += (before || (tie && j < i)) ? 1 : 0;
    }
    if (rank < k) indices[r * k + rank] = i;
  }
}

}  // namespace

void CudaBackend::argsort(const Tensor& indices, const Tensor& x, bool descending) {
  MT_CHECK(x.dim() == 2 && is_dense(x) && indices.dim() == 2 && indices.size(0) == x.size(0) &&
               indices.size(1) <= x.size(1) && indices.dtype() == kInt64 && is_dense(indices),
           "argsort: CUDA kernel needs x (rows, n) and int64 indices (rows, k <= n), both contiguous; got ", x.sizes(),
           " and ", indices.sizes());
  const int64_t rows = x.size(0), n = x.size(1), k = indices.size(1);
  if (rows * n == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL(x.dtype(), "argsort", [&]<typename T>() {
    const auto g = elementwise_geometry(rows * n, multiprocessors_);
    argsort_rank_kernel<T><<<g.blocks, g.threads, 0, stream_>>>(static_cast<int64_t*>(indices.raw_data()),
                                                                 static_cast<const T*>(x.raw_data()), rows, n, k,
                                                                 descending);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
