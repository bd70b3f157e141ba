// CudaBackend::layer_norm and layer_norm_backward, with the CPU backend's formulas
// (tensor/cpu/cpu_layer_norm.cpp; written out in tensor/backend.h).
//
// Forward and dx: one warp per row (grid-striding over rows), the row's sums combined with warp
// shuffles; passes over the row as on the CPU: the mean, the residue of x - mean (Note [Layer norm
// rows that do not sum to 0] in tensor/cpu/cpu_layer_norm.cpp), then the variance around both.
// dweight, dbias: one thread per column, looping over the rows. Adjacent threads read adjacent
// columns, so the loads coalesce, and each sum is made in a fixed order: the result is the same
// on every run (atomics across rows would not be), which DDP's bitwise replica checks rely on.
// Accumulations are in T (the CPU's are in double), so float32 results differ from the CPU's in
// the last bits.
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) v += __shfl_xor_sync(0xffffffffu, v, delta);
  return v;
}

// mean(x - m) over a row of n, by the whole warp: what the rounding of m left in the row
// (Note [Layer norm rows that do not sum to 0], tensor/cpu/cpu_layer_norm.cpp).
template <typename T>
__device__ inline T row_residue(const T* xr, T m, int64_t n, int lane) {
  T s = 0;
  for (int64_t i = lane; i < n; i += kWarpSize) s += xr[i] - m;
  return warp_sum(s) / T(n);
}

// x, y: (rows, n)  w, b: (n)  mean, rstd: (rows)
template <typename T>
__global__ void layer_norm_kernel(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t n,
                                  T eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t r = global_thread() / kWarpSize; r < rows; r += warps) {  // whole warps take each row
    const T* xr = x + r * n;
    T s = 0;
    for (int64_t i = lane; i < n; i += kWarpSize) s += xr[i];
    const T m = warp_sum(s) / T(n);
    const T residue = row_residue(xr, m, n, lane);
    T sq = 0;
    for (int64_t i = lane; i < n; i += kWarpSize) {
      const T c = xr[i] - m - residue;
      sq += c * c;
    }
    const T inv = T(1) / sqrt(warp_sum(sq) / T(n) + eps);
    T* yr = y + r * n;
    for (int64_t i = lane; i < n; i += kWarpSize) yr[i] = (xr[i] - m - residue) * inv * w[i] + b[i];
    if (lane == 0) mean[r] = m + residue, rstd[r] = inv;
  }
}

// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)), g = dy·w      dx, dy, x: (rows, n)
template <typename T>
__global__ void layer_norm_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                                     int64_t rows, int64_t n) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t r = global_thread() / kWarpSize; r < rows; r += warps) {
    const T* xr = x + r * n;
    const T* gr = dy + r * n;
    const T m = mean[r], s = rstd[r];
    const T residue = row_residue(xr, m, n, lane);  // x - m - residue sums to 0
    T sum_g = 0, sum_gx = 0;
    for (int64_t i = lane; i < n; i += kWarpSize) {
      const T gw = gr[i] * w[i];
      sum_g += gw, sum_gx += gw * (xr[i] - m - residue) * s;
    }
    const T mean_g = warp_sum(sum_g) / T(n), mean_gx = warp_sum(sum_gx) / T(n);
    T* dxr = dx + r * n;
    for (int64_t i = lane; i < n; i += kWarpSize)
      dxr[i] = s * (gr[i] * w[i] - mean_g - (xr[i] - m - residue) * s * mean_gx);
  }
}

// dw[c] = Σ_r dy[r, c]·x̂[r, c],  db[c] = Σ_r dy[r, c]
template <typename T>
__global__ void layer_norm_dw_kernel(T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, int64_t rows,
                                     int64_t n) {
  for (int64_t c = global_thread(); c < n; c += grid_threads()) {
    T sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T g = dy[r * n + c];
      sw += g * (x[r * n + c] - mean[r]) * rstd[r];
      sb += g;
    }
    dw[c] = sw, db[c] = sb;
  }
}

unsigned warp_per_row_blocks(int64_t rows, int multiprocessors) {
  return row_geometry(rows, 1, multiprocessors).blocks;  // 8 rows (warps) per 256-thread block
}

void check_layer_norm(const char* op, const Tensor& x, const Tensor& mean, const Tensor& rstd) {
  MT_CHECK(x.dim() == 2 && is_dense(x) && is_dense(mean) && is_dense(rstd) && mean.numel() == x.sizes()[0], op,
           ": CUDA kernel needs contiguous x (rows, n), mean and rstd (rows), got ", x.sizes(), " and ", mean.sizes());
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm("layer_norm", x, mean, rstd);
  const int64_t rows = x.sizes()[0], n = x.sizes()[1];
  if (rows == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&]<typename T>() {
    layer_norm_kernel<T><<<warp_per_row_blocks(rows, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
        static_cast<T*>(out.raw_data()), static_cast<T*>(mean.raw_data()), static_cast<T*>(rstd.raw_data()),
        static_cast<const T*>(x.raw_data()), static_cast<const T*>(weight.raw_data()),
        static_cast<const T*>(bias.raw_data()), rows, n, T(eps));
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                      const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  check_layer_norm("layer_norm_backward", x, mean, rstd);
  MT_CHECK(is_dense(dy) && is_dense(dx) && dy.sizes() == x.sizes() && dx.sizes() == x.sizes(),
           "layer_norm_backward: dy ", dy.sizes(), " and dx ", dx.sizes(), " must be contiguous like x ", x.sizes());
  const int64_t rows = x.sizes()[0], n = x.sizes()[1];
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const T* g = static_cast<const T*>(dy.raw_data());
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* mu = static_cast<const T*>(mean.raw_data());
    const T* rs = static_cast<const T*>(rstd.raw_data());
    if (rows > 0) {
      layer_norm_dx_kernel<T><<<warp_per_row_blocks(rows, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
          static_cast<T*>(dx.raw_data()), g, xs, static_cast<const T*>(weight.raw_data()), mu, rs, rows, n);
      MT_CUDA_CHECK_LAUNCH();
    }
    const auto geo = elementwise_geometry(n, multiprocessors_);
    layer_norm_dw_kernel<T><<<geo.blocks, geo.threads, 0, stream_>>>(
        static_cast<T*>(dweight.raw_data()), static_cast<T*>(dbias.raw_data()), g, xs, mu, rs, rows, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
