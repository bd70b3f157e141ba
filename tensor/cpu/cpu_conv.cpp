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
// Planes are independent (each writes only its own rows of cols, or its own image plane): chunks
// of planes run on the intra-op threads (tensor/parallel.h).
//
// bfloat16 and float16 (Note [Low-precision compute type]): im2col and max pooling only move and
// compare elements, exactly, in the 16-bit type; col2im adds each plane's taps in a float32 plane
// and rounds it once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

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
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "im2col", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* dst = cpu::data<T>(cols);
    parallel_for(n * c, cpu::kGrainWork / (kk * l + 1), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {  // p = one (n, c) plane; its rows in cols follow each other
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
  });
}

void CpuBackend::col2im(const Tensor& x, const Tensor& cols, const Window2d& w) {
  check_planes("col2im", x, 4);
  check_planes("col2im", cols, 3);
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t kk = w.kernel_h * w.kernel_w, plane = w.in_h * w.in_w, l = w.out_h() * w.out_w();
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "col2im", [&]<typename T>() {
    using Acc = compute_t<T>;  // a 16-bit plane is summed in float32, then rounded once
    const T* src = cpu::data<const T>(cols);
    T* dst = cpu::data<T>(x);
    parallel_for(n * c, cpu::kGrainWork / (kk * l + 1), [&](int64_t lo, int64_t hi) {
      std::vector<Acc> sums(std::is_same_v<Acc, T> ? 0 : plane);
      for (int64_t p = lo; p < hi; ++p) {
        Acc* out = sums.data();
        if constexpr (std::is_same_v<Acc, T>) out = dst + p * plane;
        std::fill(out, out + plane, Acc(0));
        for (int64_t i = 0; i < w.kernel_h; ++i)
          for (int64_t j = 0; j < w.kernel_w; ++j) {
            const T* row = src + (p * kk + i * w.kernel_w + j) * l;
            const int64_t off_w = j * w.dilation_w - w.pad_w;
            for_each_tap(w, i, j, [&](int64_t o, int64_t in_row, Range r) {
              if (in_row < 0 || r.hi == r.lo) return;  // all padding: nothing flows back
              // to[e·sw] += from[e] for ow = lo + e. cols and x never overlap: restrict lets the
              // stride-1 loop vectorise.
              Acc* __restrict to = out + in_row + off_w + r.lo * w.stride_w;
              const T* __restrict from = row + o + r.lo;
              const int64_t count = r.hi - r.lo;
              if (w.stride_w == 1) {
                for (int64_t e = 0; e < count; ++e) to[e] += Acc(from[e]);
              } else {
                for (int64_t e = 0; e < count; ++e) to[e * w.stride_w] += Acc(from[e]);
              }
            });
          }
        if constexpr (!std::is_same_v<Acc, T>) std::copy_n(out, plane, dst + p * plane);  // rounds once
      }
    });
  });
}

namespace {

// max_pool2d's step: offer element `at` of a window to the running maximum, by PyTorch's CPU rule
// (`val > max || isnan(val)`): a NaN wins, and only a later NaN replaces it.
template <typename T>
inline void offer(const T* in, int64_t at, T& best, int64_t& best_at) {
  const T v = in[at];
  if (v > best || v != v) best = v, best_at = at;
}

// One plane whose windows all lie inside it (no padding, no dilation, no overhang): no range checks, and the
// taps in the outer loops with one output row innermost, so each step of the inner loop is an
// independent select the compiler can vectorise instead of a data-dependent branch.
template <typename T>
void max_pool_inside(const T* __restrict in, T* __restrict out, int64_t* __restrict idx, const Window2d& w,
                     int64_t oh_n, int64_t ow_n) {
  const int64_t sw = w.stride_w;
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    T* o = out + oh * ow_n;
    int64_t* io = idx + oh * ow_n;
    const int64_t row0 = oh * w.stride_h * w.in_w;  // the windows' top-left corners: row0 + ow·sw
    for (int64_t ow = 0; ow < ow_n; ++ow) o[ow] = in[row0 + ow * sw], io[ow] = row0 + ow * sw;
    for (int64_t i = 0; i < w.kernel_h; ++i)
      for (int64_t j = 0; j < w.kernel_w; ++j) {
        if (i == 0 && j == 0) continue;
        const int64_t base = row0 + i * w.in_w + j;
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          const T v = in[base + ow * sw];
          const bool take = (v > o[ow]) | (v != v);  // offer()'s rule
          o[ow] = take ? v : o[ow];
          io[ow] = take ? base + ow * sw : io[ow];
        }
      }
  }
}

}  // namespace

// out[p, oh, ow] = max over the window; indices = h·W + w of the winner (see offer for NaN).
// Windows that lie inside the plane (no padding or dilation, the usual MaxPool2d(2)) take
// max_pool_inside; otherwise each ow's valid columns are computed once per call (col_range) and the
// valid rows once per output row, so the inner loop is a plain scan either way.
void CpuBackend::max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) {
  check_planes("max_pool2d", x, 3);
  check_planes("max_pool2d", out, 3);
  check_planes("max_pool2d", indices, 3);
  const int64_t planes = x.size(0), oh_n = w.out_h(), ow_n = w.out_w(), plane = w.in_h * w.in_w;
  // Taps j of column window ow that land inside [0, W): j in [lo, hi).
  std::vector<Range> col_range(ow_n);
  // Backend's contract promises every window a real element; check it where it is cheap.
  const auto check_window = [](Range r, int64_t at) {
    MT_CHECK(r.lo < r.hi, "max_pool2d: window ", at, " holds only padding");
  };
  for (int64_t ow = 0; ow < ow_n; ++ow) {
    col_range[ow] = valid_range(ow * w.stride_w - w.pad_w, w.dilation_w, w.in_w, w.kernel_w);
    check_window(col_range[ow], ow);
  }
  int64_t* idx = cpu::data<int64_t>(indices);
  // ceil_mode's last window may overhang the plane (Note [Pooling ceil_mode]), so the last window's end is checked.
  const bool inside = w.pad_h == 0 && w.pad_w == 0 && w.dilation_h == 1 && w.dilation_w == 1 &&
                      (oh_n - 1) * w.stride_h + w.kernel_h <= w.in_h && (ow_n - 1) * w.stride_w + w.kernel_w <= w.in_w;
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "max_pool2d", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* dst = cpu::data<T>(out);
    if (inside) {
      const int64_t out_plane = oh_n * ow_n;
      parallel_for(planes, cpu::kGrainWork / (plane + 1), [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p)
          max_pool_inside(src + p * plane, dst + p * out_plane, idx + p * out_plane, w, oh_n, ow_n);
      });
      return;
    }
    for (int64_t p = 0; p < planes; ++p) {
      const T* in = src + p * plane;
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        const int64_t h0 = oh * w.stride_h - w.pad_h;
        const Range rows = valid_range(h0, w.dilation_h, w.in_h, w.kernel_h);
        check_window(rows, oh);
        const int64_t o = (p * oh_n + oh) * ow_n;
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          const Range cols = col_range[ow];
          const int64_t w0 = ow * w.stride_w - w.pad_w;
          // Start from the window's first real element (padding is -inf, so it never wins).
          int64_t best_at = (h0 + rows.lo * w.dilation_h) * w.in_w + w0 + cols.lo * w.dilation_w;
          T best = in[best_at];
          for (int64_t i = rows.lo; i < rows.hi; ++i) {
            const int64_t row = (h0 + i * w.dilation_h) * w.in_w + w0;
            for (int64_t j = cols.lo; j < cols.hi; ++j) offer(in, row + j * w.dilation_w, best, best_at);
          }
          dst[o + ow] = best;
          idx[o + ow] = best_at;
        }
      }
    }
  });
}

}  // namespace mt
