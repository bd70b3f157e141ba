// CudaBackend::layer_norm and layer_norm_backward, with the CPU backend's formulas
// (tensor/cpu/cpu_layer_norm.cpp; written out in tensor/backend.h).
//
// Forward and dx: one warp per row (grid-striding over rows), the row's sums combined with warp
// shuffles; passes over the row as on the CPU: the mean, the residue of x - mean (Note [Layer norm
// rows that do not sum to 0] in tensor/cpu/cpu_layer_norm.cpp), then the variance around both.
// dweight, dbias: sums over the rows, made by many blocks in two passes (Note [Layer norm weight
// gradients in two passes]); each sum is made in a fixed order, so the result is the same on every
// run (atomics across rows would not be), which DDP's bitwise replica checks rely on.
// Accumulations are in C = compute_t<T> (the CPU's are in double), so float32 results differ from
// the CPU's in the last bits. bfloat16 and float16 rows are read as float32, every sum and the
// statistics mean and rstd are float32 (the raw op makes them so for 16-bit x), and each output
// element is rounded to 16 bits once (Note [Low-precision compute type], tensor/dtype.h).
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
template <typename T, typename C = compute_t<T>>
__device__ inline C row_residue(const T* xr, C m, int64_t n, int lane) {
  C s = 0;
  for (int64_t i = lane; i < n; i += kWarpSize) s += C(xr[i]) - m;
  return warp_sum(s) / C(n);
}

// x, y: (rows, n)  w, b: (n)  mean, rstd: (rows), in C
template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_kernel(T* y, C* mean, C* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t n,
                                  C eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t r = global_thread() / kWarpSize; r < rows; r += warps) {  // whole warps take each row
    const T* xr = x + r * n;
    C s = 0;
    for (int64_t i = lane; i < n; i += kWarpSize) s += C(xr[i]);
    const C m = warp_sum(s) / C(n);
    const C residue = row_residue(xr, m, n, lane);
    C sq = 0;
    for (int64_t i = lane; i < n; i += kWarpSize) {
      const C c = C(xr[i]) - m - residue;
      sq += c * c;
    }
    const C inv = C(1) / sqrt(warp_sum(sq) / C(n) + eps);
    T* yr = y + r * n;
    for (int64_t i = lane; i < n; i += kWarpSize) yr[i] = T((C(xr[i]) - m - residue) * inv * C(w[i]) + C(b[i]));
    if (lane == 0) mean[r] = m + residue, rstd[r] = inv;
  }
}

// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)), g = dy·w      dx, dy, x: (rows, n)
template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const C* mean, const C* rstd,
                                     int64_t rows, int64_t n) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t r = global_thread() / kWarpSize; r < rows; r += warps) {
    const T* xr = x + r * n;
    const T* gr = dy + r * n;
    const C m = mean[r], s = rstd[r];
    const C residue = row_residue(xr, m, n, lane);  // x - m - residue sums to 0
    C sum_g = 0, sum_gx = 0;
    for (int64_t i = lane; i < n; i += kWarpSize) {
      const C gw = C(gr[i]) * C(w[i]);
      sum_g += gw, sum_gx += gw * (C(xr[i]) - m - residue) * s;
    }
    const C mean_g = warp_sum(sum_g) / C(n), mean_gx = warp_sum(sum_gx) / C(n);
    T* dxr = dx + r * n;
    for (int64_t i = lane; i < n; i += kWarpSize)
      dxr[i] = T(s * (C(gr[i]) * C(w[i]) - mean_g - (C(xr[i]) - m - residue) * s * mean_gx));
  }
}

// Note [Layer norm weight gradients in two passes]: dw[c] = Σ_r dy[r, c]·x̂[r, c] and
// db[c] = Σ_r dy[r, c] reduce over the rows, and there are few columns (768 for GPT-2 small): one
// thread per column would be 3 blocks on an H200's 132 multiprocessors, each thread walking 4096
// rows alone. So the (rows, n) matrix is cut into tiles of kDwColumns columns by `chunk` rows, one
// block each:
//   pass 1 (layer_norm_dw_partial_kernel): the block's 32 x 8 threads are 32 columns by 8 row
//     lanes; lane y sums rows y, y + 8, ... of the chunk (a warp reads 32 adjacent columns of one
//     row: one 128-byte line), then the 8 lane sums go through shared memory and thread y == 0 adds
//     them in lane order, writing one partial per (chunk, column);
//   pass 2 (layer_norm_dw_finish_kernel): one thread per column adds its chunks' partials in chunk
//     order.
// Both orders are fixed by the shape alone, so every run gives the same bits; no atomics. The chunk
// count (dw_geometry) fills the GPU: columns/32 tiles times chunks ~ a full GPU of blocks, but no
// chunk shorter than kDwMinChunk rows, below which the second pass and the partials' traffic would
// cost more than the split saves. One chunk (few rows, or many columns) writes dw and db directly
// and skips pass 2.
constexpr int kDwColumns = kWarpSize;                      // columns per tile: one warp's coalesced row read
constexpr int kDwRowLanes = kThreadsPerBlock / kDwColumns;  // 8 row lanes per block
constexpr int64_t kDwMinChunk = 64;

struct DwGeometry {
  int64_t tiles = 1, chunks = 1, chunk = 1;
};
DwGeometry dw_geometry(int64_t rows, int64_t n, int multiprocessors) {
  DwGeometry g;
  g.tiles = std::max<int64_t>(1, (n + kDwColumns - 1) / kDwColumns);
  const int64_t full = std::max(1, multiprocessors) * kFullBlocksPerMultiprocessor;
  const int64_t wanted = std::max<int64_t>(1, (full + g.tiles - 1) / g.tiles);
  g.chunks = std::clamp<int64_t>(std::min(wanted, rows / kDwMinChunk), 1, kMaxSplits);
  g.chunk = std::max<int64_t>(1, (rows + g.chunks - 1) / g.chunks);
  g.chunks = std::max<int64_t>(1, (rows + g.chunk - 1) / g.chunk);  // no empty last chunk
  return g;
}

// Pass 1. Block b: tile b % tiles (columns), chunk b / tiles (rows). pw, pb: (chunks, n) partials
// in C, or dw and db themselves (Out = T) when there is one chunk.
template <typename T, typename Out, typename C = compute_t<T>>
__global__ void layer_norm_dw_partial_kernel(Out* pw, Out* pb, const T* dy, const T* x, const C* mean, const C* rstd,
                                             int64_t rows, int64_t n, int64_t tiles, int64_t chunks, int64_t chunk) {
  __shared__ C sw[kDwRowLanes][kDwColumns], sb[kDwRowLanes][kDwColumns];
  const int tx = threadIdx.x % kDwColumns, ty = threadIdx.x / kDwColumns;
  for (int64_t b = blockIdx.x; b < tiles * chunks; b += gridDim.x) {
    const int64_t c = (b % tiles) * kDwColumns + tx, part = b / tiles;
    const int64_t r_end = min(rows, (part + 1) * chunk);
    C w = 0, g = 0;
    if (c < n)
      for (int64_t r = part * chunk + ty; r < r_end; r += kDwRowLanes) {
        const C d = dy[r * n + c];
        w += d * (C(x[r * n + c]) - mean[r]) * rstd[r];
        g += d;
      }
    sw[ty][tx] = w, sb[ty][tx] = g;
    __syncthreads();
    if (ty == 0 && c < n) {
      for (int y = 1; y < kDwRowLanes; ++y) w += sw[y][tx], g += sb[y][tx];
      pw[part * n + c] = Out(w), pb[part * n + c] = Out(g);
    }
    __syncthreads();  // sw, sb are rewritten by the next tile
  }
}

// Pass 2: dw[c] = Σ_k pw[k, c], db[c] = Σ_k pb[k, c], k in order.
template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_dw_finish_kernel(T* dw, T* db, const C* pw, const C* pb, int64_t chunks, int64_t n) {
  for (int64_t c = global_thread(); c < n; c += grid_threads()) {
    C w = 0, g = 0;
    for (int64_t k = 0; k < chunks; ++k) w += pw[k * n + c], g += pb[k * n + c];
    dw[c] = T(w), db[c] = T(g);
  }
}

unsigned warp_per_row_blocks(int64_t rows, int multiprocessors) {
  return row_geometry(rows, 1, multiprocessors).blocks;  // 8 rows (warps) per 256-thread block
}

void check_layer_norm(const char* op, const Tensor& x, const Tensor& mean, const Tensor& rstd) {
  MT_CHECK(x.dim() == 2 && is_dense(x) && is_dense(mean) && is_dense(rstd) && mean.numel() == x.sizes()[0], op,
           ": CUDA kernel needs contiguous x (rows, n), mean and rstd (rows), got ", x.sizes(), " and ", mean.sizes());
  const DType stats = is_low_precision(x.dtype()) ? kFloat32 : x.dtype();
  MT_CHECK(mean.dtype() == stats && rstd.dtype() == stats, op, ": mean and rstd of ", x.dtype(), " rows must be ",
           stats, ", got ", mean.dtype());
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm("layer_norm", x, mean, rstd);
  const int64_t rows = x.sizes()[0], n = x.sizes()[1];
  if (rows == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "layer_norm", [&]<typename T>() {
    using C = compute_t<T>;
    layer_norm_kernel<T><<<warp_per_row_blocks(rows, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
        static_cast<T*>(out.raw_data()), static_cast<C*>(mean.raw_data()), static_cast<C*>(rstd.raw_data()),
        static_cast<const T*>(x.raw_data()), static_cast<const T*>(weight.raw_data()),
        static_cast<const T*>(bias.raw_data()), rows, n, C(eps));
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
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using C = compute_t<T>;
    const T* g = static_cast<const T*>(dy.raw_data());
    const T* xs = static_cast<const T*>(x.raw_data());
    const C* mu = static_cast<const C*>(mean.raw_data());
    const C* rs = static_cast<const C*>(rstd.raw_data());
    if (rows > 0) {
      layer_norm_dx_kernel<T><<<warp_per_row_blocks(rows, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
          static_cast<T*>(dx.raw_data()), g, xs, static_cast<const T*>(weight.raw_data()), mu, rs, rows, n);
      MT_CUDA_CHECK_LAUNCH();
    }
    if (n == 0) return;
    T* dw = static_cast<T*>(dweight.raw_data());
    T* db = static_cast<T*>(dbias.raw_data());
    const DwGeometry geo = dw_geometry(rows, n, multiprocessors_);
    const int64_t blocks = std::min<int64_t>(geo.tiles * geo.chunks, std::int64_t{1} << 30);
    if (geo.chunks == 1) {  // one chunk: pass 1 writes dw and db
      layer_norm_dw_partial_kernel<T, T><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream_>>>(
          dw, db, g, xs, mu, rs, rows, n, geo.tiles, geo.chunks, geo.chunk);
      MT_CUDA_CHECK_LAUNCH();
      return;
    }
    // (2, chunks, n): pass 1's sums, in C
    const Tensor partials = empty({2, geo.chunks, n}, {.dtype = dtype_of<C>::value, .device = x.device()});
    C* pw = static_cast<C*>(partials.raw_data());
    C* pb = pw + geo.chunks * n;
    layer_norm_dw_partial_kernel<T, C><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream_>>>(
        pw, pb, g, xs, mu, rs, rows, n, geo.tiles, geo.chunks, geo.chunk);
    MT_CUDA_CHECK_LAUNCH();
    const auto fin = elementwise_geometry(n, multiprocessors_);
    layer_norm_dw_finish_kernel<T><<<fin.blocks, fin.threads, 0, stream_>>>(dw, db, pw, pb, geo.chunks, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
