// CudaBackend::softmax: softmax or log-softmax over the last dim of a contiguous tensor, in the
// CPU backend's numerically stable form (tensor/cpu/cpu_softmax.cpp): with m = max(x),
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
//   log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))
// One warp per row (rows up to 1024 long, 8 rows per block) or one block per row, grid-striding over
// rows. Three passes over the row: max, sum of exponentials (both combined with warp shuffles, then
// shared memory across warps), then the writes. A NaN anywhere in a row makes m NaN and so the
// whole row NaN, as on the CPU. bfloat16 and float16 rows are read as float32, m, the sum and every
// result are float32, and each result is rounded to 16 bits once, on the store (Note
// [Low-precision compute type], tensor/dtype.h).
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

template <typename T>
__device__ inline T max_nan(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// Combines v across the kThreads threads of one row; every one of them gets the result.
template <int kThreads, typename T, typename F>
__device__ inline T row_combine(T v, F combine, T* scratch) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) v = combine(v, __shfl_xor_sync(0xffffffffu, v, delta));
  if constexpr (kThreads > kWarpSize) {
    constexpr int kWarps = kThreads / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    __syncthreads();  // scratch may still be read from the previous combine
    if (threadIdx.x % kWarpSize == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < kWarps; ++w) v = combine(v, scratch[w]);
  }
  return v;
}

// x, y: (rows, n) contiguous; y may alias x (each element is read before it is written, and the
// write pass only reads the element it writes).
template <typename T, int kThreads>
__global__ void softmax_kernel(T* y, const T* x, int64_t rows, int64_t n, bool log) {
  using C = compute_t<T>;
  constexpr int kRowsPerBlock = kThreadsPerBlock / kThreads;
  __shared__ C scratch[kThreadsPerBlock / kWarpSize];
  const int lane = threadIdx.x % kThreads;
  const int64_t first = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads;
  const int64_t step = int64_t(gridDim.x) * kRowsPerBlock;
  const int64_t rounds = (rows + step - 1) / step;  // equal for all threads: __syncthreads is safe
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t row = first + round * step;
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * n;
    C m = active ? C(xr[0]) : C(0);
    for (int64_t i = lane; active && i < n; i += kThreads) m = max_nan(m, C(xr[i]));
    m = row_combine<kThreads>(m, [](C a, C b) { return max_nan(a, b); }, scratch);
    C sum = 0;
    for (int64_t i = lane; active && i < n; i += kThreads) sum += exp(C(xr[i]) - m);
    sum = row_combine<kThreads>(sum, [](C a, C b) { return a + b; }, scratch);
    if (active) {
      T* yr = y + row * n;
      if (log) {
        const C log_sum = ::log(sum);
        for (int64_t i = lane; i < n; i += kThreads) yr[i] = T((C(xr[i]) - m) - log_sum);
      } else {
        const C inv = C(1) / sum;
        for (int64_t i = lane; i < n; i += kThreads) yr[i] = T(exp(C(xr[i]) - m) * inv);
      }
    }
  }
}

}  // namespace

void CudaBackend::softmax(const Tensor& out, const Tensor& in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  MT_CHECK(is_dense(in) && is_dense(out) && in.sizes() == out.sizes(), name,
           ": CUDA kernel needs contiguous in and out of one shape, got ", in.sizes(), " and ", out.sizes());
  if (in.numel() == 0) return;
  const int64_t n = in.dim() == 0 ? 1 : in.sizes().back();
  const int64_t rows = in.numel() / n;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(in.dtype(), name, [&]<typename T>() {
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    const auto g = row_geometry(rows, n, multiprocessors_);
    if (g.threads_per_row == kWarpSize) {
      softmax_kernel<T, kWarpSize><<<g.blocks, g.threads, 0, stream_>>>(y, x, rows, n, log);
    } else {
      softmax_kernel<T, kThreadsPerBlock><<<g.blocks, g.threads, 0, stream_>>>(y, x, rows, n, log);
    }
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
