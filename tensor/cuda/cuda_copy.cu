// CudaBackend::copy_on_device and ::fill: casting copies between tensors on one device (what
// contiguous(), .to(dtype), clone() and copy_ end in) and constant fills. Host <-> device transfers
// are in cuda_copy.cpp.
//
// Every dtype casts to every other, as on the CPU (tensor/cpu/cpu_copy.cpp) and with the same code:
// a cast from or to bfloat16 or float16 goes through float32 with tensor/half.h's conversions
// (mt::BFloat16, mt::Half: constexpr, so kernels call them too), so the GPU rounds to nearest even
// and writes the CPU's bits, NaN included, where CUDA's own __float2bfloat16_rn would write 0x7FFF.
#include <type_traits>

#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

// Through the source's compute type (Note [Low-precision compute type], tensor/dtype.h): bfloat16
// -> float64 is float -> double, exact; float64 -> bfloat16 is double -> float -> bfloat16, two
// roundings, as on the CPU and in PyTorch. A copy within one dtype moves the element as it is, so a
// 16-bit NaN keeps its payload (a trip through float32 would not).
template <typename TO, typename TI>
struct Cast {
  __device__ TO operator()(TI x) const {
    if constexpr (std::is_same_v<TO, TI>) return x;
    else return static_cast<TO>(static_cast<compute_t<TI>>(x));
  }
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
  MT_DISPATCH_ALL_AND_LOWP(dst.dtype(), "copy", [&]<typename TO>() {
    MT_DISPATCH_ALL_AND_LOWP(src.dtype(), "copy", [&]<typename TI>() {
      map_unary<TO, TI>(*this, dst, src, Cast<TO, TI>{});
    });
  });
}

void CudaBackend::fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(dst.dtype(), "fill", [&]<typename T>() {
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
