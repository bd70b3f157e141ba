// CudaBackend index kernels: index_select / index_add (one index list for a whole dim: embedding
// lookups and their backward) and gather / scatter_add (one index per element: cross-entropy's
// target logit and its backward). raw_ops hands every operand over as a contiguous 3-D
// (outer, n, inner) view around the indexed dim, as for the CPU (tensor/cpu/cpu_index.cpp).
//
// Bounds: the CPU checks every index before writing. Here the indices live on the GPU, so each
// thread checks its own; a bad one is reported through the device error slot and its element is
// skipped (a read yields 0, an accumulation is dropped): nothing outside the tensors is touched, and
// the error is raised at the next synchronisation (Note [Device errors] in cuda_error.h).
// index_add and scatter_add accumulate with atomicAdd, so repeated indices add up; the order of the
// additions is not fixed, so float results may differ from the CPU's in the last bits.
// Offsets are 32-bit (I = uint32_t) when every operand fits (Note [32-bit index math] in indexer.h).
// bfloat16 and float16 take every kernel here: index_select and gather move elements, and
// index_add and scatter_add add through a compare-and-swap loop (Note [16-bit atomic add]).
#include <cstdint>

#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_error.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

using detail::DeviceErrorSlot;
using detail::IndexOp;
using detail::report_index_error;

// atomicAdd for each dtype: float and double natively (double since sm_60), int64 through the
// unsigned 64-bit overload (two's complement addition is the same operation), the 16-bit ones below.
__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Note [16-bit atomic add]: a bfloat16 or float16 element is added to by a compare-and-swap loop
// on the aligned 32-bit word that holds it (the other half of the word is put back unchanged):
// read the element, add in float32, round to 16 bits once, and swap the word in if nobody changed
// it meanwhile. So each addition rounds, as the CPU's index_add and scatter_add do (one rounding
// per added row), and only the order of the additions differs. atomicCAS on 32 bits exists on
// every GPU and in the emulator; CUDA's own 16-bit atomicAdd would need sm_80 for bfloat16.
template <typename T>  // mt::BFloat16 or mt::Half
__device__ inline void atomic_add_16(T* p, float v) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  auto* word = reinterpret_cast<unsigned int*>(address & ~uintptr_t{3});
  const unsigned shift = (address & 2u) ? 16u : 0u;  // little-endian: the upper half holds the element at +2
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const float sum = float(T::from_bits(static_cast<uint16_t>(assumed >> shift))) + v;
    const unsigned int updated = (assumed & ~(0xFFFFu << shift)) | (unsigned(T(sum).bits) << shift);
    old = atomicCAS(word, assumed, updated);
  } while (old != assumed);
}
__device__ inline void atomic_add(BFloat16* p, BFloat16 v) { atomic_add_16(p, float(v)); }
__device__ inline void atomic_add(Half* p, Half v) { atomic_add_16(p, float(v)); }

// out(outer, k, inner)[a, j, i] = in(outer, n, inner)[a, index[j], i]
template <typename T, typename I>
__global__ void index_select_kernel(T* out, const T* in, const int64_t* index, I count, I k, I n,
                                    I inner, DeviceErrorSlot* errors) {
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I i = e % inner, j = (e / inner) % k, a = e / (inner * k);
    const int64_t idx = index[j];
    if (idx < 0 || idx >= n) {
      report_index_error(errors, IndexOp::IndexSelect, idx, j, n);
      out[e] = T(0);
      continue;
    }
    out[e] = in[(a * n + static_cast<I>(idx)) * inner + i];
  }
}

// out(outer, n, inner)[a, index[j], i] += src(outer, k, inner)[a, j, i]
template <typename T, typename I>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* index, I count, I k, I n,
                                 I inner, DeviceErrorSlot* errors) {
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I i = e % inner, j = (e / inner) % k, a = e / (inner * k);
    const int64_t idx = index[j];
    if (idx < 0 || idx >= n) {
      report_index_error(errors, IndexOp::IndexAdd, idx, j, n);
      continue;
    }
    atomic_add(out + (a * n + static_cast<I>(idx)) * inner + i, src[e]);
  }
}

// out[a, j, i] = in[a, index[a, j, i], i]; index, out: (outer, k, inner), in: (outer, n, inner)
template <typename T, typename I>
__global__ void gather_kernel(T* out, const T* in, const int64_t* index, I count, I k, I n,
                              I inner, DeviceErrorSlot* errors) {
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I i = e % inner, a = e / (inner * k);
    const int64_t idx = index[e];
    if (idx < 0 || idx >= n) {
      report_index_error(errors, IndexOp::Gather, idx, e, n);
      out[e] = T(0);
      continue;
    }
    out[e] = in[(a * n + static_cast<I>(idx)) * inner + i];
  }
}

// out[a, index[a, j, i], i] += src[a, j, i]; index, src: (outer, k, inner), out: (outer, n, inner)
template <typename T, typename I>
__global__ void scatter_add_kernel(T* out, const T* src, const int64_t* index, I count, I k, I n,
                                   I inner, DeviceErrorSlot* errors) {
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I i = e % inner, a = e / (inner * k);
    const int64_t idx = index[e];
    if (idx < 0 || idx >= n) {
      report_index_error(errors, IndexOp::ScatterAdd, idx, e, n);
      continue;
    }
    atomic_add(out + (a * n + static_cast<I>(idx)) * inner + i, src[e]);
  }
}

struct Dims3 {
  int64_t outer, n, inner;
};

Dims3 dims3(const char* op, const char* what, const Tensor& t) {
  MT_CHECK(t.dim() == 3 && is_dense(t), op, ": CUDA kernel needs ", what,
           " as a contiguous 3-D (outer, n, inner) view, got shape ", t.sizes());
  return {t.sizes()[0], t.sizes()[1], t.sizes()[2]};
}

void check_index(const char* op, const Tensor& index) {
  MT_CHECK(index.dtype() == kInt64 && is_dense(index), op, ": index must be a contiguous int64 tensor, got ",
           index.dtype());
}

}  // namespace

void CudaBackend::index_select(const Tensor& out, const Tensor& in, const Tensor& index) {
  const Dims3 d = dims3("index_select", "in", in);
  const Dims3 o = dims3("index_select", "out", out);
  check_index("index_select", index);
  const int64_t k = index.numel();
  MT_CHECK(o.outer == d.outer && o.n == k && o.inner == d.inner, "index_select: out ", out.sizes(),
           " does not match in ", in.sizes(), " and ", k, " indices");
  const int64_t count = out.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), "index_select", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type(fits_index32({count, in.numel(), k}), [&]<typename I>() {
      index_select_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()),
          static_cast<const int64_t*>(index.raw_data()), I(count), I(k), I(d.n), I(d.inner),
          detail::device_error_slot());
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  const Dims3 d = dims3("index_add", "out", out);
  const Dims3 s = dims3("index_add", "src", src);
  check_index("index_add", index);
  const int64_t k = index.numel();
  MT_CHECK(s.outer == d.outer && s.n == k && s.inner == d.inner, "index_add: src ", src.sizes(),
           " does not match out ", out.sizes(), " and ", k, " indices");
  const int64_t count = src.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "index_add", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type(fits_index32({count, out.numel(), k}), [&]<typename I>() {
      index_add_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(src.raw_data()),
          static_cast<const int64_t*>(index.raw_data()), I(count), I(k), I(d.n), I(d.inner),
          detail::device_error_slot());
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::gather(const Tensor& out, const Tensor& in, const Tensor& index) {
  const Dims3 d = dims3("gather", "in", in);
  const Dims3 o = dims3("gather", "out", out);
  check_index("gather", index);
  MT_CHECK(index.sizes() == out.sizes() && o.outer == d.outer && o.inner == d.inner, "gather: index ",
           index.sizes(), " and out ", out.sizes(), " do not match in ", in.sizes());
  const int64_t count = out.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), "gather", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type(fits_index32({count, in.numel()}), [&]<typename I>() {
      gather_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()),
          static_cast<const int64_t*>(index.raw_data()), I(count), I(o.n), I(d.n), I(d.inner),
          detail::device_error_slot());
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  const Dims3 d = dims3("scatter_add", "out", out);
  const Dims3 s = dims3("scatter_add", "src", src);
  check_index("scatter_add", index);
  MT_CHECK(index.sizes() == src.sizes() && s.outer == d.outer && s.inner == d.inner, "scatter_add: index ",
           index.sizes(), " and src ", src.sizes(), " do not match out ", out.sizes());
  const int64_t count = src.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "scatter_add", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type(fits_index32({count, out.numel()}), [&]<typename I>() {
      scatter_add_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(src.raw_data()),
          static_cast<const int64_t*>(index.raw_data()), I(count), I(s.n), I(d.n), I(d.inner),
          detail::device_error_slot());
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
