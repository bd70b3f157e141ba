// CudaBackend::uniform and ::normal: the same numbers as the CPU backend for the same generator
// state, element by element. The mapping from Philox words to numbers is Note [Random stream layout]
// in tensor/cpu/cpu_random.cpp; this file follows it exactly, with the same block function
// (tensor/detail/philox.h) and word-to-float helpers (tensor/generator.h), compiled for the device.
// One thread per Philox block writes that block's 4 (float32) or 2 (float64) elements. The generator
// is advanced on the host by whole blocks, as on the CPU, so CPU and GPU fills can be interleaved and
// the stream stays the same.
// Uniforms are bit-identical to the CPU's (integer math, one fma, one rounding). Normals go through
// log, sqrt, sin and cos, whose CUDA versions may differ from glibc's in the last bit.
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"
#include "tensor/generator.h"
#include "tensor/detail/philox.h"

namespace mt::cuda {
namespace {

template <typename T>
constexpr int kPerBlock = std::is_same_v<T, float> ? 4 : 2;

template <typename T>
__global__ void uniform_kernel(T* out, int64_t n, uint64_t seed, uint64_t first, double low, double range, T top) {
  constexpr int K = kPerBlock<T>;
  const int64_t blocks = (n + K - 1) / K;
  for (int64_t b = global_thread(); b < blocks; b += grid_threads()) {
    const auto w = ::mt::detail::philox_block(seed, first + static_cast<uint64_t>(b));
    T v[K];
    if constexpr (std::is_same_v<T, float>) {
      for (int j = 0; j < 4; ++j) v[j] = fminf(static_cast<float>(fma(range, static_cast<double>(uniform_float(w[j])), low)), top);
    } else {
      for (int j = 0; j < 2; ++j) v[j] = fmin(fma(range, uniform_double(w[2 * j], w[2 * j + 1]), low), top);
    }
    for (int j = 0; j < K && b * K + j < n; ++j) out[b * K + j] = v[j];
  }
}

// One Box–Muller pair from u1 in (0, 1] and u2 in [0, 1), in double like the CPU.
template <typename T>
__device__ inline void box_muller(double u1, double u2, double mean, double std, T* pair) {
  const double r = sqrt(-2.0 * log(u1));
  const double t = 2.0 * 3.141592653589793 * u2;  // std::numbers::pi as a double
  pair[0] = static_cast<T>(fma(std, r * cos(t), mean));
  pair[1] = static_cast<T>(fma(std, r * sin(t), mean));
}

template <typename T>
__global__ void normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t first, double mean, double std) {
  constexpr int K = kPerBlock<T>;
  const int64_t blocks = (n + K - 1) / K;
  for (int64_t b = global_thread(); b < blocks; b += grid_threads()) {
    const auto w = ::mt::detail::philox_block(seed, first + static_cast<uint64_t>(b));
    T v[K];
    if constexpr (std::is_same_v<T, float>) {
      for (int p = 0; p < 2; ++p)
        box_muller(1.0 - uniform_float(w[2 * p]), uniform_float(w[2 * p + 1]), mean, std, v + 2 * p);
    } else {
      box_muller(1.0 - uniform_double(w[0], w[1]), uniform_double(w[2], w[3]), mean, std, v);
    }
    for (int j = 0; j < K && b * K + j < n; ++j) out[b * K + j] = v[j];
  }
}

void check_random_target(const char* op, const Tensor& out) {
  MT_CHECK(is_dense(out), op, ": CUDA kernel needs a contiguous tensor, got shape ", out.sizes());
}

}  // namespace

void CudaBackend::uniform(const Tensor& out, Generator& gen, double low, double high) {
  check_random_target("uniform", out);
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(out.dtype(), "uniform", [&]<typename T>() {
    const int64_t n = out.numel();
    const int64_t blocks = (n + kPerBlock<T> - 1) / kPerBlock<T>;
    const uint64_t first = gen.advance(static_cast<uint64_t>(blocks));  // as the CPU: whole blocks
    if (n == 0) return;
    // The largest T below high keeps the interval half-open (see CpuBackend::uniform).
    const T top = high > low ? std::nextafter(static_cast<T>(high), static_cast<T>(low)) : static_cast<T>(low);
    const auto g = elementwise_geometry(blocks, multiprocessors_);
    uniform_kernel<T><<<g.blocks, g.threads, 0, stream_>>>(static_cast<T*>(out.raw_data()), n, gen.seed(), first,
                                                           low, high - low, top);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::normal(const Tensor& out, Generator& gen, double mean, double std) {
  check_random_target("normal", out);
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(out.dtype(), "normal", [&]<typename T>() {
    const int64_t n = out.numel();
    const int64_t blocks = (n + kPerBlock<T> - 1) / kPerBlock<T>;
    const uint64_t first = gen.advance(static_cast<uint64_t>(blocks));
    if (n == 0) return;
    const auto g = elementwise_geometry(blocks, multiprocessors_);
    normal_kernel<T><<<g.blocks, g.threads, 0, stream_>>>(static_cast<T*>(out.raw_data()), n, gen.seed(), first,
                                                          mean, std);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
