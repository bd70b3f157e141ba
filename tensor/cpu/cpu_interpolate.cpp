// CpuBackend::bilinear and bilinear_backward: bilinear resampling of the last two dims of (P, H, W)
// planes, and its adjoint, in one pass each. The source rows and columns and their weights come from
// the caller (LinearTaps, tensor/backend.h); interpolate (autograd/functions/interpolate.cpp)
// computes them as PyTorch 1.13 does and keeps the composition of index_select passes beside this
// kernel as its reference.
//
// Forward, per output element, PyTorch's order of operations (the W taps first):
//   y[p, i, j] = λr0[i]·(λc0[j]·x[p, r0, c0] + λc1[j]·x[p, r0, c1]) + λr1[i]·(λc0[j]·x[p, r1, c0] + λc1[j]·x[p, r1, c1])
// Backward: dx[p, r, c] = Σ over the outputs that read (r, c) of dy·λr·λc, gathered output row by
// output row: each output row i adds λr0[i]·(its row resampled back along W) to dx row r0[i], and
// λr1[i]·(the same) to row r1[i]. Planes are independent: chunks of planes run on the intra-op
// threads (Note [Fixed chunks]), each writing only its own planes of y or dx.
// bfloat16 and float16 compute in float32 (C = compute_t<T>): weights and sums in float32, y rounded
// once, and dx summed in a float32 plane before its one rounding (Note [Low-precision compute type]).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

// One plane: x (H, W) -> y (OH, OW). The column taps are read into C once per call.
template <typename T, typename C = compute_t<T>>
void bilinear_plane(const T* __restrict x, T* __restrict y, int64_t w, const LinearTaps& rows,
                    const std::vector<int64_t>& c0, const std::vector<int64_t>& c1, const std::vector<C>& lc0,
                    const std::vector<C>& lc1) {
  const int64_t oh = static_cast<int64_t>(rows.i0.size()), ow = static_cast<int64_t>(c0.size());
  for (int64_t i = 0; i < oh; ++i) {
    const T* x0 = x + rows.i0[i] * w;
    const T* x1 = x + rows.i1[i] * w;
    const C lr0 = static_cast<C>(rows.l0[i]), lr1 = static_cast<C>(rows.l1[i]);
    T* yi = y + i * ow;
    for (int64_t j = 0; j < ow; ++j)
      yi[j] = T(lr0 * (lc0[j] * C(x0[c0[j]]) + lc1[j] * C(x0[c1[j]])) +
                lr1 * (lc0[j] * C(x1[c0[j]]) + lc1[j] * C(x1[c1[j]])));
  }
}

// The adjoint of bilinear_plane: dy (OH, OW) -> dx (H, W), dx written whole. row: OW scratch;
// plane: H·W scratch for 16-bit T (the sums, rounded into dx at the end), unused otherwise.
template <typename T, typename C = compute_t<T>>
void bilinear_plane_backward(T* __restrict dx, const T* __restrict dy, int64_t h, int64_t w, const LinearTaps& rows,
                             const std::vector<int64_t>& c0, const std::vector<int64_t>& c1, const std::vector<C>& lc0,
                             const std::vector<C>& lc1, std::vector<C>& row, std::vector<C>& plane) {
  const int64_t oh = static_cast<int64_t>(rows.i0.size()), ow = static_cast<int64_t>(c0.size());
  C* sums = plane.data();
  if constexpr (std::is_same_v<T, C>) sums = dx;
  std::fill(sums, sums + h * w, C(0));
  for (int64_t i = 0; i < oh; ++i) {
    const T* dyi = dy + i * ow;
    std::fill(row.begin(), row.end(), C(0));
    for (int64_t j = 0; j < ow; ++j) {  // the output row's gradient taken back along W
      row[c0[j]] += lc0[j] * C(dyi[j]);
      row[c1[j]] += lc1[j] * C(dyi[j]);
    }
    C* d0 = sums + rows.i0[i] * w;
    C* d1 = sums + rows.i1[i] * w;
    const C lr0 = static_cast<C>(rows.l0[i]), lr1 = static_cast<C>(rows.l1[i]);
    for (int64_t c = 0; c < w; ++c) d0[c] += lr0 * row[c];
    for (int64_t c = 0; c < w; ++c) d1[c] += lr1 * row[c];
  }
  if constexpr (!std::is_same_v<T, C>) std::copy_n(sums, h * w, dx);  // rounds once
}

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

}  // namespace

void CpuBackend::bilinear(const Tensor& out, const Tensor& x, const LinearTaps& rows, const LinearTaps& cols) {
  MT_CHECK(cpu::is_contiguous(x) && cpu::is_contiguous(out) && x.dim() == 3 && out.dim() == 3, "bilinear: CPU kernel needs "
           "contiguous (P, H, W) in and (P, OH, OW) out, got ", x.sizes(), " and ", out.sizes());
  const int64_t planes = x.size(0), h = x.size(1), w = x.size(2), oh = out.size(1), ow = out.size(2);
  if (out.numel() == 0) return;
  MT_DISPATCH_FLOAT_AND_LOWP(x.dtype(), "bilinear", [&]<typename T>() {
    using C = compute_t<T>;
    const T* in = cpu::data<const T>(x);
    T* y = cpu::data<T>(out);
    const std::vector<C> lc0 = as<C>(cols.l0), lc1 = as<C>(cols.l1);
    parallel_for(planes, std::max<int64_t>(1, cpu::kGrainWork / (oh * ow)), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) bilinear_plane(in + p * h * w, y + p * oh * ow, w, rows, cols.i0, cols.i1, lc0, lc1);
    });
  });
}

void CpuBackend::bilinear_backward(const Tensor& dx, const Tensor& dy, const LinearTaps& rows, const LinearTaps& cols) {
  MT_CHECK(cpu::is_contiguous(dx) && cpu::is_contiguous(dy) && dx.dim() == 3 && dy.dim() == 3, "bilinear_backward: CPU "
           "kernel needs contiguous (P, H, W) dx and (P, OH, OW) dy, got ", dx.sizes(), " and ", dy.sizes());
  const int64_t planes = dx.size(0), h = dx.size(1), w = dx.size(2), oh = dy.size(1), ow = dy.size(2);
  if (dx.numel() == 0) return;
  MT_DISPATCH_FLOAT_AND_LOWP(dx.dtype(), "bilinear_backward", [&]<typename T>() {
    using C = compute_t<T>;
    T* out = cpu::data<T>(dx);
    const T* g = cpu::data<const T>(dy);
    const std::vector<C> lc0 = as<C>(cols.l0), lc1 = as<C>(cols.l1);
    parallel_for(planes, std::max<int64_t>(1, cpu::kGrainWork / (oh * ow)), [&](int64_t lo, int64_t hi) {
      std::vector<C> row(w), plane(std::is_same_v<T, C> ? 0 : h * w);
      for (int64_t p = lo; p < hi; ++p)
        bilinear_plane_backward(out + p * h * w, g + p * oh * ow, h, w, rows, cols.i0, cols.i1, lc0, lc1, row, plane);
    });
  });
}

}  // namespace mt
