// map_unary / map_binary / map_ternary for CUDA: out[i] = f(in[i]), f(a[i], b[i]), f(c[i], a[i], b[i])
// over same-shaped tensors, the kernels behind copy, fill, unary, binary and where. f is a functor
// struct with a __device__ operator(), so each op gets its own kernel with the operation inlined.
//
// Paths, cheapest first (picked on the host, once per call):
//   packed   every operand one dense run, same element type, all pointers 16-byte aligned: each
//            thread loads and stores 16-byte packs (a float4 of floats, two doubles), then the tail.
//   dense    every operand one dense run (casts, or unaligned views): one element per thread-step.
//   strided  anything else: StridedIndexer (tensor/cuda/indexer.h) turns i into each operand's offset,
//            in 32-bit arithmetic when the offsets fit (Note [32-bit index math]).
// All three are grid-stride loops over elements (or packs) with launch geometry from launch.h.
// Outputs may alias an input with the same layout (in-place ops): each element is read before it is
// written, by the same thread.
#pragma once

#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/indexer.h"
#include "tensor/cuda/launch.h"

namespace mt::cuda {

template <typename T>
struct alignas(kPackBytes) Pack {
  static constexpr int kSize = kPackBytes / sizeof(T);
  T v[kSize];
};

__device__ inline int64_t global_thread() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }

// ---- unary: out = f(in) ----------------------------------------------------------------------------

template <typename T, typename F>
__global__ void unary_packed_kernel(T* out, const T* in, int64_t n, F f) {
  constexpr int K = Pack<T>::kSize;
  const int64_t packs = n / K;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    Pack<T> v = reinterpret_cast<const Pack<T>*>(in)[p];
#pragma unroll
    for (int k = 0; k < K; ++k) v.v[k] = f(v.v[k]);
    reinterpret_cast<Pack<T>*>(out)[p] = v;
  }
  for (int64_t i = packs * K + global_thread(); i < n; i += grid_threads()) out[i] = f(in[i]);
}

template <typename TO, typename TI, typename F>
__global__ void unary_dense_kernel(TO* out, const TI* in, int64_t n, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = f(in[i]);
}

// Ix: StridedIndexer<2> in uint32_t or int64_t (Note [32-bit index math], indexer.h).
template <typename TO, typename TI, typename Ix, typename F>
__global__ void unary_strided_kernel(TO* out, const TI* in, typename Ix::Index n, Ix ix, F f) {
  using I = typename Ix::Index;
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    I off[2];
    ix.offsets(i, off);
    out[off[0]] = f(in[off[1]]);
  }
}

template <typename TO, typename TI, typename F>
void map_unary(const CudaBackend& be, const Tensor& out, const Tensor& in, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  TO* o = static_cast<TO*>(out.raw_data());
  const TI* x = static_cast<const TI*>(in.raw_data());
  const auto ix = make_indexer<2>(out.sizes(), {out.strides().begin(), in.strides().begin()});
  if (is_unit_run(ix)) {
    if constexpr (std::is_same_v<TO, TI>) {  // packs hold one type: casts take the dense path
      if (is_pack_aligned(o) && is_pack_aligned(x)) {
        const auto g = elementwise_geometry(n / Pack<TO>::kSize + 1, be.multiprocessors());
        unary_packed_kernel<TO><<<g.blocks, g.threads, 0, be.stream()>>>(o, x, n, f);
        MT_CUDA_CHECK_LAUNCH();
        return;
      }
    }
    const auto g = elementwise_geometry(n, be.multiprocessors());
    unary_dense_kernel<<<g.blocks, g.threads, 0, be.stream()>>>(o, x, n, f);
  } else {
    const auto g = elementwise_geometry(n, be.multiprocessors());
    with_index_width(ix, n, [&](const auto& w) {
      using I = typename std::decay_t<decltype(w)>::Index;
      unary_strided_kernel<<<g.blocks, g.threads, 0, be.stream()>>>(o, x, static_cast<I>(n), w, f);
    });
  }
  MT_CUDA_CHECK_LAUNCH();
}

// ---- binary: out = f(a, b) ------------------------------------------------------------------------

template <typename T, typename F>
__global__ void binary_packed_kernel(T* out, const T* a, const T* b, int64_t n, F f) {
  constexpr int K = Pack<T>::kSize;
  const int64_t packs = n / K;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    const Pack<T> x = reinterpret_cast<const Pack<T>*>(a)[p];
    const Pack<T> y = reinterpret_cast<const Pack<T>*>(b)[p];
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < K; ++k) r.v[k] = f(x.v[k], y.v[k]);
    reinterpret_cast<Pack<T>*>(out)[p] = r;
  }
  for (int64_t i = packs * K + global_thread(); i < n; i += grid_threads()) out[i] = f(a[i], b[i]);
}

template <typename T, typename F>
__global__ void binary_dense_kernel(T* out, const T* a, const T* b, int64_t n, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = f(a[i], b[i]);
}

template <typename T, typename Ix, typename F>
__global__ void binary_strided_kernel(T* out, const T* a, const T* b, typename Ix::Index n, Ix ix, F f) {
  using I = typename Ix::Index;
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    I off[3];
    ix.offsets(i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <typename T, typename F>
void map_binary(const CudaBackend& be, const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  T* o = static_cast<T*>(out.raw_data());
  const T* x = static_cast<const T*>(a.raw_data());
  const T* y = static_cast<const T*>(b.raw_data());
  const auto ix = make_indexer<3>(out.sizes(), {out.strides().begin(), a.strides().begin(), b.strides().begin()});
  if (is_unit_run(ix) && is_pack_aligned(o) && is_pack_aligned(x) && is_pack_aligned(y)) {
    const auto g = elementwise_geometry(n / Pack<T>::kSize + 1, be.multiprocessors());
    binary_packed_kernel<<<g.blocks, g.threads, 0, be.stream()>>>(o, x, y, n, f);
  } else if (is_unit_run(ix)) {
    const auto g = elementwise_geometry(n, be.multiprocessors());
    binary_dense_kernel<<<g.blocks, g.threads, 0, be.stream()>>>(o, x, y, n, f);
  } else {
    const auto g = elementwise_geometry(n, be.multiprocessors());
    with_index_width(ix, n, [&](const auto& w) {
      using I = typename std::decay_t<decltype(w)>::Index;
      binary_strided_kernel<<<g.blocks, g.threads, 0, be.stream()>>>(o, x, y, static_cast<I>(n), w, f);
    });
  }
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda
