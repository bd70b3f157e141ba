// CpuBackend sliding-window kernels: im2col / col2im (convolution as one GEMM, and its backward) and
// max_pool2d with argmax indices. The geometry (kernel, stride, padding, dilation) is a Window2d
// (tensor/backend.h); raw_conv.cpp checks it and the shapes before calling these.
//
// Why im2col rather than a direct convolution: the GEMM it feeds runs at OpenBLAS's peak, and the
// copy costs O(N·C·kh·kw·OH·OW) moves against O(that·O) multiply-adds in the GEMM, so for any layer
// with more than a few output channels the copy is a small fraction (bench/ measures the whole conv).
//
// The inner loops run over one output row (ow = 0 .. OW-1). The positions ow whose input column
// iw = ow·sw + j·dw - pw falls inside [0, W) form one interval [ow_lo, ow_hi), computed once per row
// (valid_range), so the loops carry no bounds test; the padding outside it is written as zeros.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

// The ow for which 0 <= ow·stride + offset < size, as [lo, hi) within [0, out).
struct Range {
  int64_t lo, hi;
};
Range valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out) {
  // ow >= ceil(-offset / stride) and ow <= floor((size - 1 - offset) / stride)
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = size - 1 - offset;
  const int64_t hi = last < 0 ? 0 : last / stride + 1;
  return {std::min(lo, out), std::clamp<int64_t>(hi, std::min(lo, out), out)};
}

void check_planes(const char* op, const Tensor& x, int64_t rank) {
  MT_CHECK(x.dim() == rank && cpu::is_contiguous(x), op, ": CPU kernel needs a contiguous ", rank,
           "-D tensor, got shape ", x.sizes());
}

// One (kernel row i, kernel column j) pass of im2col or col2im over one channel plane:
// col[oh·OW + ow] <-> plane[ih·W + iw]. Kernel decides the direction (copy in, or add back).
template <typename Visit>
void for_each_tap(const Window2d& w, int64_t i, int64_t j, Visit&& visit) {
  const int64_t oh_n = w.out_h(), ow_n = w.out_w();
  const Range cols = valid_range(j * w.dilation_w - w.pad_w, w.stride_w, w.in_w, ow_n);
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
    const bool row_inside = ih >= 0 && ih < w.in_h;
    // (output row offset, input row offset or -1 when the whole row is padding, the valid ow range)
    visit(oh * ow_n, row_inside ? ih * w.in_w : -1, row_inside ? cols : Range{0, 0});
  }
}

}  // namespace

void CpuBackend::im2col(const Tensor& cols, const Tensor& x, const Window2d& w) {
  check_planes("im2col", x, 4);
  check_planes("im2col", cols, 3);
  const int64_t n = x.size(0), c = x.size(1), ow_n = w.out_w();
  const int64_t kk = w.kernel_h * w.kernel_w, plane = w.in_h * w.in_w, l = w.out_h() * ow_n;
  MT_DISPATCH_FLOAT(x.dtype(), "im2col", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* dst = cpu::data<T>(cols);
    for (int64_t p = 0; p < n * c; ++p) {  // p = one (n, c) plane; its rows in cols follow each other
      const T* in = src + p * plane;
      for (int64_t i = 0; i < w.kernel_h; ++i)
        for (int64_t j = 0; j < w.kernel_w; ++j) {
          T* row = dst + (p * kk + i * w.kernel_w + j) * l;
          const int64_t off_w = j * w.dilation_w - w.pad_w;
          for_each_tap(w, i, j, [&](int64_t o, int64_t in_row, Range r) {
            T* out = row + o;
            std::fill(out, out + r.lo, T(0));
            const int64_t base = in_row + off_w;  // in[base + ow·sw] is the tap's input for ow in r
            if (w.stride_w == 1) {
              if (r.hi > r.lo) std::copy_n(in + base + r.lo, r.hi - r.lo, out + r.lo);
            } else {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) out[ow] = in[base + ow * w.stride_w];
            }
            std::fill(out + r.hi, out + ow_n, T(0));
          });
        }
    }
  });
}

void CpuBackend::col2im(const Tensor& x, const Tensor& cols, const Window2d& w) {
  check_planes("col2im", x, 4);
  check_planes("col2im", cols, 3);
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t kk = w.kernel_h * w.kernel_w, plane = w.in_h * w.in_w, l = w.out_h() * w.out_w();
  MT_DISPATCH_FLOAT(x.dtype(), "col2im", [&]<typename T>() {
    const T* src = cpu::data<const T>(cols);
    T* dst = cpu::data<T>(x);
    std::fill(dst, dst + n * c * plane, T(0));
    for (int64_t p = 0; p < n * c; ++p) {
      T* out = dst + p * plane;
      for (int64_t i = 0; i < w.kernel_h; ++i)
        for (int64_t j = 0; j < w.kernel_w; ++j) {
          const T* row = src + (p * kk + i * w.kernel_w + j) * l;
          const int64_t off_w = j * w.dilation_w - w.pad_w;
          for_each_tap(w, i, j, [&](int64_t o, int64_t in_row, Range r) {
            if (in_row < 0 || r.hi == r.lo) return;  // all padding: nothing flows back
            // to[e·sw] += from[e] for ow = lo + e. cols and x never overlap: restrict lets the
            // stride-1 loop vectorise.
            T* __restrict to = out + in_row + off_w + r.lo * w.stride_w;
            const T* __restrict from = row + o + r.lo;
            const int64_t count = r.hi - r.lo;
            if (w.stride_w == 1) {
              for (int64_t e = 0; e < count; ++e) to[e] += from[e];
            } else {
              for (int64_t e = 0; e < count; ++e) to[e * w.stride_w] += from[e];
            }
          });
        }
    }
  });
}

// out[p, oh, ow] = max over the window; indices = h·W + w of the winner. A NaN replaces any maximum
// (PyTorch's CPU rule: `val > max || isnan(val)`), so a NaN in the window gives a NaN out.
void CpuBackend::max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) {
  check_planes("max_pool2d", x, 3);
  check_planes("max_pool2d", out, 3);
  check_planes("max_pool2d", indices, 3);
  const int64_t planes = x.size(0), oh_n = w.out_h(), ow_n = w.out_w(), plane = w.in_h * w.in_w;
  int64_t* idx = cpu::data<int64_t>(indices);
  MT_DISPATCH_FLOAT(x.dtype(), "max_pool2d", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* dst = cpu::data<T>(out);
    for (int64_t p = 0; p < planes; ++p) {
      const T* in = src + p * plane;
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          const int64_t h0 = oh * w.stride_h - w.pad_h, w0 = ow * w.stride_w - w.pad_w;
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_at = -1;
          for (int64_t i = 0; i < w.kernel_h; ++i) {
            const int64_t ih = h0 + i * w.dilation_h;
            if (ih < 0 || ih >= w.in_h) continue;
            for (int64_t j = 0; j < w.kernel_w; ++j) {
              const int64_t iw = w0 + j * w.dilation_w;
              if (iw < 0 || iw >= w.in_w) continue;
              const T v = in[ih * w.in_w + iw];
              if (best_at < 0 || v > best || std::isnan(v)) best = v, best_at = ih * w.in_w + iw;
            }
          }
          const int64_t o = (p * oh_n + oh) * ow_n + ow;
          dst[o] = best;
          idx[o] = best_at;
        }
    }
  });
}

}  // namespace mt
