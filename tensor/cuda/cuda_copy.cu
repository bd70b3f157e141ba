// CudaBackend::copy_on_device and ::fill: casting copies between tensors on one device (what
// contiguous(), .to(dtype), clone() and copy_ end in) and constant fills. Host <-> device transfers
// are in cuda_copy.cpp.
#include <cuda_fp16.h>

#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

template <typename TO, typename TI>
struct Cast {
  __device__ TO operator()(TI x) const { return static_cast<TO>(x); }
};

// float16 is a storage format, as on the CPU (tensor/half.h): elements are raw uint16_t bits, cast to
// and from float32 only (DDP's fp16-compressed gradients), rounding to nearest even like the CPU.
struct FloatToHalf {
  __device__ uint16_t operator()(float x) const { return __half_as_ushort(__float2half_rn(x)); }
};
struct HalfToFloat {
  __device__ float operator()(uint16_t h) const { return __half2float(__ushort_as_half(h)); }
};

// out[off] = value, strided (the dense case is one run of stride 1).
// Ix: StridedIndexer<1> in uint32_t or int64_t (Note [32-bit index math], indexer.h).
template <typename T, typename Ix>
__global__ void fill_kernel(T* out, typename Ix::Index n, Ix ix, T value) {
  using I = typename Ix::Index;
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    I off[1];
    ix.offsets(i, off);
    out[off[0]] = value;
  }
}

}  // namespace

void CudaBackend::copy_on_device(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.sizes() == src.sizes(), "copy: shapes differ: ", dst.sizes(), " and ", src.sizes());
  if (dst.numel() == 0) return;
  DeviceGuard guard(device_);
  if (dst.dtype() == src.dtype() && is_dense(dst) && is_dense(src)) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.numel() * element_size(dst.dtype()),
                                  cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  if (dst.dtype() == DType::Float16 || src.dtype() == DType::Float16) {
    MT_CHECK((dst.dtype() == DType::Float16 && src.dtype() == DType::Float32) ||
                 (dst.dtype() == DType::Float32 && src.dtype() == DType::Float16),
             "copy: float16 only casts to and from float32, not ", src.dtype(), " to ", dst.dtype());
    if (dst.dtype() == DType::Float16) map_unary<uint16_t, float>(*this, dst, src, FloatToHalf{});
    else map_unary<float, uint16_t>(*this, dst, src, HalfToFloat{});
    return;
  }
  MT_DISPATCH_ALL(dst.dtype(), "copy", [&]<typename TO>() {
    MT_DISPATCH_ALL(src.dtype(), "copy", [&]<typename TI>() { map_unary<TO, TI>(*this, dst, src, Cast<TO, TI>{}); });
  });
}

void CudaBackend::fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL(dst.dtype(), "fill", [&]<typename T>() {
    const auto ix = make_indexer<1>(dst.sizes(), {dst.strides().begin()});
    const auto g = elementwise_geometry(n, multiprocessors_);
    with_index_width(ix, n, [&](const auto& w) {
      using I = typename std::decay_t<decltype(w)>::Index;
      fill_kernel<T><<<g.blocks, g.threads, 0, stream_>>>(static_cast<T*>(dst.raw_data()), static_cast<I>(n), w,
                                                          static_cast<T>(value));
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
