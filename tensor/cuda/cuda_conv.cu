// CudaBackend sliding-window kernels: im2col, col2im and max_pool2d, the same contracts as the CPU's
// (tensor/cpu/cpu_conv.cpp, geometry in Window2d from tensor/backend.h). The GEMMs of a convolution
// go through CudaBackend::gemm (cuBLAS); these kernels only move data.
//
// One thread per output element, grid-striding (launch.h), in 32-bit index math when the tensors
// fit (Note [32-bit index math] in indexer.h):
//   im2col      per cols element (n·c, tap, oh, ow): read one input element, or 0 in the padding.
//   col2im      per input element (n·c, h, w): gather the cols entries that read it, tap by tap.
//               Gathering instead of scattering with atomicAdd makes the sum's order fixed, so the
//               result is deterministic (it may differ from the CPU's order in the last bits).
//   max_pool2d  per output element: scan its window; a NaN wins, as on the CPU.
// bfloat16 and float16 take the same kernels: im2col and max_pool2d move elements as they are;
// col2im sums in float32 and rounds once (Note [Low-precision compute type], tensor/dtype.h).
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

// Window2d's geometry in the kernels' index type: int32_t when every operand fits (Note [32-bit index
// math] in indexer.h; signed, as window coordinates start in the padding, below 0), else int64_t.
template <typename I>
struct Window {
  I in_h, in_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};
template <typename I>
Window<I> window(const Window2d& w) {
  return {I(w.in_h),     I(w.in_w),  I(w.kernel_h), I(w.kernel_w),   I(w.stride_h),
          I(w.stride_w), I(w.pad_h), I(w.pad_w),    I(w.dilation_h), I(w.dilation_w)};
}

// cols: (P·kh·kw, OH·OW) with P = N·C planes; x: (P, H, W)
template <typename T, typename I>
__global__ void im2col_kernel(T* cols, const T* x, I count, Window<I> w, I oh_n, I ow_n) {
  const I kk = w.kernel_h * w.kernel_w, l = oh_n * ow_n;
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I ow = e % ow_n, oh = (e / ow_n) % oh_n, tap = (e / l) % kk, p = e / (l * kk);
    const I i = tap / w.kernel_w, j = tap % w.kernel_w;
    const I ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
    const I iw = ow * w.stride_w - w.pad_w + j * w.dilation_w;
    const bool inside = ih >= 0 && ih < w.in_h && iw >= 0 && iw < w.in_w;
    cols[e] = inside ? x[(p * w.in_h + ih) * w.in_w + iw] : T(0);
  }
}

// x[p, h, w] = Σ over taps (i, j) whose window position (oh, ow) lands on (h, w):
//   oh·sh = h + ph - i·dh  and  ow·sw = w + pw - j·dw, each exactly divisible and inside [0, OH|OW).
template <typename T, typename I>
__global__ void col2im_kernel(T* x, const T* cols, I count, Window<I> w, I oh_n, I ow_n) {
  const I kk = w.kernel_h * w.kernel_w, l = oh_n * ow_n;
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I iw = e % w.in_w, ih = (e / w.in_w) % w.in_h, p = e / (w.in_w * w.in_h);
    compute_t<T> acc = 0;
    for (I i = 0; i < w.kernel_h; ++i) {
      const I hh = ih + w.pad_h - i * w.dilation_h;
      if (hh < 0 || hh % w.stride_h != 0 || hh / w.stride_h >= oh_n) continue;
      for (I j = 0; j < w.kernel_w; ++j) {
        const I ww = iw + w.pad_w - j * w.dilation_w;
        if (ww < 0 || ww % w.stride_w != 0 || ww / w.stride_w >= ow_n) continue;
        acc += compute_t<T>(cols[(p * kk + i * w.kernel_w + j) * l + (hh / w.stride_h) * ow_n + ww / w.stride_w]);
      }
    }
    x[e] = T(acc);
  }
}

// out, indices: (P, OH, OW); x: (P, H, W)
template <typename T, typename I>
__global__ void max_pool2d_kernel(T* out, int64_t* indices, const T* x, I count, Window<I> w, I oh_n,
                                  I ow_n) {
  for (I e = static_cast<I>(global_thread()); e < count; e += static_cast<I>(grid_threads())) {
    const I ow = e % ow_n, oh = (e / ow_n) % oh_n, p = e / (ow_n * oh_n);
    const T* in = x + p * w.in_h * w.in_w;
    compute_t<T> best = 0;
    int64_t best_at = -1;
    for (I i = 0; i < w.kernel_h; ++i) {
      const I ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
      if (ih < 0 || ih >= w.in_h) continue;
      for (I j = 0; j < w.kernel_w; ++j) {
        const I iw = ow * w.stride_w - w.pad_w + j * w.dilation_w;
        if (iw < 0 || iw >= w.in_w) continue;
        const compute_t<T> v = in[ih * w.in_w + iw];
        if (best_at < 0 || v > best || v != v) best = v, best_at = ih * w.in_w + iw;
      }
    }
    out[e] = T(best);
    indices[e] = best_at;
  }
}

void check_planes(const char* op, const Tensor& t, int rank) {
  MT_CHECK(t.dim() == rank && is_dense(t), op, ": CUDA kernel needs a contiguous ", rank, "-D tensor, got shape ",
           t.sizes());
}

}  // namespace

void CudaBackend::im2col(const Tensor& cols, const Tensor& x, const Window2d& w) {
  check_planes("im2col", x, 4);
  check_planes("im2col", cols, 3);
  const int64_t count = cols.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "im2col", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type<int32_t>(fits_index32({cols.numel(), x.numel()}), [&]<typename I>() {
      im2col_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(static_cast<T*>(cols.raw_data()),
                                                              static_cast<const T*>(x.raw_data()), I(count),
                                                              window<I>(w), I(w.out_h()), I(w.out_w()));
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::col2im(const Tensor& x, const Tensor& cols, const Window2d& w) {
  check_planes("col2im", x, 4);
  check_planes("col2im", cols, 3);
  const int64_t count = x.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "col2im", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type<int32_t>(fits_index32({cols.numel(), x.numel()}), [&]<typename I>() {
      col2im_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(static_cast<T*>(x.raw_data()),
                                                              static_cast<const T*>(cols.raw_data()), I(count),
                                                              window<I>(w), I(w.out_h()), I(w.out_w()));
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) {
  check_planes("max_pool2d", x, 3);
  check_planes("max_pool2d", out, 3);
  check_planes("max_pool2d", indices, 3);
  const int64_t count = out.numel();
  if (count == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "max_pool2d", [&]<typename T>() {
    const auto g = elementwise_geometry(count, multiprocessors_);
    with_index_type<int32_t>(fits_index32({out.numel(), x.numel()}), [&]<typename I>() {
      max_pool2d_kernel<T, I><<<g.blocks, g.threads, 0, stream_>>>(
          static_cast<T*>(out.raw_data()), static_cast<int64_t*>(indices.raw_data()),
          static_cast<const T*>(x.raw_data()), I(count), window<I>(w), I(w.out_h()), I(w.out_w()));
    });
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
