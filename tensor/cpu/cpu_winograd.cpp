// CpuBackend's Winograd F(2x2, 3x3) transforms: the input tiles into the Winograd domain (Bᵀ·d·B),
// the GEMMs' products back into output tiles (Aᵀ·m·A), and that step's adjoint for the weight
// gradient (A·dy·Aᵀ). The weight transform and the GEMMs between
// the two are raw ops (tensor/raw_winograd.cpp, which also holds the Note with the matrices). Only
// the 3x3 stride-1 case exists; raw_winograd.cpp decides when it is used.
//
// Each kernel works one channel plane at a time: `planes(begin, end)` runs a range of them with its
// own scratch, and the intra-op threads split the range (run_planes). Planes write disjoint parts of
// their output, so the result is the same bits at any thread count (Note [Fixed chunks]). Within a
// plane, one row of tiles at a time, with the tile column tw innermost: the 16 values of a tile go
// to 16 different rows of v, each written contiguously along tw, so the loops vectorise.
#include <algorithm>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

int64_t tiles_of(int64_t out) { return (out + 1) / 2; }

// planes(begin, end) over [0, count) on the intra-op threads, a plane being 16 values per tile of
// work (what each kernel writes or reads in the Winograd domain).
template <typename F>
void run_planes(int64_t count, int64_t tiles, const F& planes) {
  parallel_for(count, cpu::kGrainWork / (16 * tiles + 1), [&](int64_t lo, int64_t hi) { planes(lo, hi); });
}

// The plane x (H, W) copied into pad (4 + 2·(TH-1) rows, 4 + 2·(TW-1) columns) with its top-left
// element at (ph, pw) and zeros around it, so that every tile's 4x4 patch lies inside pad.
template <typename T>
void pad_plane(T* pad, int64_t pad_h, int64_t pad_w, const T* x, const Window2d& w) {
  std::fill(pad, pad + pad_h * pad_w, T(0));
  for (int64_t h = 0; h < w.in_h; ++h) {
    const int64_t ph = h + w.pad_h;
    if (ph >= pad_h) break;  // rows below the last tile's patch are never read
    const int64_t count = std::min(w.in_w, pad_w - w.pad_w);
    if (count > 0) std::copy_n(x + h * w.in_w, count, pad + ph * pad_w + w.pad_w);
  }
}

}  // namespace

// v[ξ = 4i + j, c, tile] = (Bᵀ·d·B)[i, j] for the 4x4 patch d of each tile, with
//   Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]:
// first along the rows (r = Bᵀ·d: r0 = d0 - d2, r1 = d1 + d2, r2 = d2 - d1, r3 = d1 - d3 for rows
// d0..d3), then the same combination of r's columns.
void CpuBackend::winograd_input(const Tensor& v, const Tensor& x, const Window2d& w) {
  MT_CHECK(x.dim() == 4 && cpu::is_contiguous(x) && v.dim() == 3 && v.size(0) == 16,
           "winograd_input: CPU kernel needs a contiguous (S, C, H, W) input and a (16, C, T) output, got ", x.sizes(),
           " and ", v.sizes());
  const int64_t samples = x.size(0), channels = x.size(1);
  const int64_t th_n = tiles_of(w.out_h()), tw_n = tiles_of(w.out_w()), tiles = th_n * tw_n;
  const int64_t pad_h = 2 * th_n + 2, pad_w = 2 * tw_n + 2;
  const int64_t xi_stride = channels * samples * tiles;  // from v[ξ] to v[ξ + 1]
  MT_DISPATCH_FLOAT(x.dtype(), "winograd_input", [&]<typename T>() {
    const T* src = cpu::data<const T>(x);
    T* dst = cpu::data<T>(v);
    const auto planes = [&](int64_t begin, int64_t end) {  // p = (s, c) in [begin, end), its own scratch
      std::vector<T> pad(pad_h * pad_w);
      for (int64_t p = begin; p < end; ++p) {
        const int64_t s = p / channels, c = p % channels;
        pad_plane(pad.data(), pad_h, pad_w, src + p * w.in_h * w.in_w, w);
        T* out = dst + c * samples * tiles + s * tiles;  // v[0, c, s·tiles]
        for (int64_t th = 0; th < th_n; ++th) {
          const T* d0 = pad.data() + 2 * th * pad_w;
          const T* d1 = d0 + pad_w;
          const T* d2 = d1 + pad_w;
          const T* d3 = d2 + pad_w;
          T* o = out + th * tw_n;
          for (int64_t tw = 0; tw < tw_n; ++tw) {
            T r[4][4];  // r = Bᵀ·d
            for (int k = 0; k < 4; ++k) {
              const int64_t at = 2 * tw + k;
              r[0][k] = d0[at] - d2[at], r[1][k] = d1[at] + d2[at];
              r[2][k] = d2[at] - d1[at], r[3][k] = d1[at] - d3[at];
            }
            for (int i = 0; i < 4; ++i) {  // row i of r·B
              T* row = o + 4 * i * xi_stride + tw;
              row[0] = r[i][0] - r[i][2];
              row[xi_stride] = r[i][1] + r[i][2];
              row[2 * xi_stride] = r[i][2] - r[i][1];
              row[3 * xi_stride] = r[i][1] - r[i][3];
            }
          }
        }
      }
    };
    run_planes(samples * channels, tiles, planes);
  });
}

// y's 2x2 tile = Aᵀ·m·A with Aᵀ = [1 1 1 0; 0 1 -1 -1]: rows first (q0 = m0 + m1 + m2,
// q1 = m1 - m2 - m3 for m's rows m0..m3), then the same along q's columns. Each row of tiles is
// written into a two-row scratch of width 2·TW and copied into y with the bias, dropping the column
// (and row) past OW (OH) when it is odd.
void CpuBackend::winograd_output(const Tensor& y, const Tensor& m, const Tensor& bias) {
  MT_CHECK(y.dim() == 4 && cpu::is_contiguous(y) && m.dim() == 3 && cpu::is_contiguous(m) && m.size(0) == 16,
           "winograd_output: CPU kernel needs a contiguous (S, O, OH, OW) output and (16, O, T) input, got ", y.sizes(),
           " and ", m.sizes());
  const int64_t samples = y.size(0), outs = y.size(1), oh_n = y.size(2), ow_n = y.size(3);
  const int64_t th_n = tiles_of(oh_n), tw_n = tiles_of(ow_n), tiles = th_n * tw_n;
  const int64_t xi_stride = outs * samples * tiles;
  MT_DISPATCH_FLOAT(y.dtype(), "winograd_output", [&]<typename T>() {
    const T* src = cpu::data<const T>(m);
    T* dst = cpu::data<T>(y);
    const T* b = bias.defined() ? cpu::data<const T>(bias) : nullptr;
    const auto planes = [&](int64_t begin, int64_t end) {  // p = (s, o) in [begin, end), its own scratch
      std::vector<T> rows(2 * 2 * tw_n);
      for (int64_t p = begin; p < end; ++p) {
        const int64_t s = p / outs, o = p % outs;
        const T add = b ? b[o] : T(0);
        const T* in = src + o * samples * tiles + s * tiles;  // m[0, o, s·tiles]
        T* plane = dst + p * oh_n * ow_n;
        for (int64_t th = 0; th < th_n; ++th) {
          T* top = rows.data();
          T* bottom = top + 2 * tw_n;
          const T* mt = in + th * tw_n;
          for (int64_t tw = 0; tw < tw_n; ++tw) {
            T q[2][4];  // q = Aᵀ·m
            for (int k = 0; k < 4; ++k) {
              const T m0 = mt[k * xi_stride + tw], m1 = mt[(4 + k) * xi_stride + tw];
              const T m2 = mt[(8 + k) * xi_stride + tw], m3 = mt[(12 + k) * xi_stride + tw];
              q[0][k] = m0 + m1 + m2, q[1][k] = m1 - m2 - m3;
            }
            top[2 * tw] = q[0][0] + q[0][1] + q[0][2], top[2 * tw + 1] = q[0][1] - q[0][2] - q[0][3];
            bottom[2 * tw] = q[1][0] + q[1][1] + q[1][2], bottom[2 * tw + 1] = q[1][1] - q[1][2] - q[1][3];
          }
          for (int64_t a = 0; a < 2 && 2 * th + a < oh_n; ++a) {
            const T* from = a == 0 ? top : bottom;
            T* to = plane + (2 * th + a) * ow_n;
            for (int64_t ow = 0; ow < ow_n; ++ow) to[ow] = from[ow] + add;
          }
        }
      }
    };
    run_planes(samples * outs, tiles, planes);
  });
}

// winograd_output's adjoint: m[:, o, tile] = A·e·Aᵀ with A = (Aᵀ)ᵀ = [1 0; 1 1; 1 -1; 0 -1] for each
// 2x2 tile e of dy (zero past OH and OW, where winograd_output drops what it computes). Along the
// rows first (f = A·e: f0 = e0, f1 = e0 + e1, f2 = e0 - e1, f3 = -e1 for e's rows e0, e1), then
// the same along f's columns. Each pair of dy rows is first copied into a zero-padded scratch.
void CpuBackend::winograd_output_backward(const Tensor& m, const Tensor& dy) {
  MT_CHECK(dy.dim() == 4 && cpu::is_contiguous(dy) && m.dim() == 3 && cpu::is_contiguous(m) && m.size(0) == 16,
           "winograd_output_backward: CPU kernel needs a contiguous (S, O, OH, OW) gradient and a (16, O, T) "
           "output, got ",
           dy.sizes(), " and ", m.sizes());
  const int64_t samples = dy.size(0), outs = dy.size(1), oh_n = dy.size(2), ow_n = dy.size(3);
  const int64_t th_n = tiles_of(oh_n), tw_n = tiles_of(ow_n), tiles = th_n * tw_n;
  const int64_t xi_stride = outs * samples * tiles;
  MT_DISPATCH_FLOAT(dy.dtype(), "winograd_output_backward", [&]<typename T>() {
    const T* src = cpu::data<const T>(dy);
    T* dst = cpu::data<T>(m);
    const auto planes = [&](int64_t begin, int64_t end) {  // p = (s, o) in [begin, end), its own scratch
      std::vector<T> rows(2 * 2 * tw_n, T(0));             // the columns past OW stay zero
      for (int64_t p = begin; p < end; ++p) {
        const int64_t s = p / outs, o = p % outs;
        const T* plane = src + p * oh_n * ow_n;
        T* out = dst + o * samples * tiles + s * tiles;  // m[0, o, s·tiles]
        for (int64_t th = 0; th < th_n; ++th) {
          T* e0 = rows.data();
          T* e1 = e0 + 2 * tw_n;
          std::copy_n(plane + 2 * th * ow_n, ow_n, e0);
          if (2 * th + 1 < oh_n) {
            std::copy_n(plane + (2 * th + 1) * ow_n, ow_n, e1);
          } else {
            std::fill(e1, e1 + ow_n, T(0));
          }
          T* o_row = out + th * tw_n;
          for (int64_t tw = 0; tw < tw_n; ++tw) {
            const T a0 = e0[2 * tw], a1 = e0[2 * tw + 1], b0 = e1[2 * tw], b1 = e1[2 * tw + 1];
            const T f[4][2] = {{a0, a1}, {a0 + b0, a1 + b1}, {a0 - b0, a1 - b1}, {-b0, -b1}};  // A·e
            for (int r = 0; r < 4; ++r) {                                                      // row r of f·Aᵀ
              T* row = o_row + 4 * r * xi_stride + tw;
              row[0] = f[r][0];
              row[xi_stride] = f[r][0] + f[r][1];
              row[2 * xi_stride] = f[r][0] - f[r][1];
              row[3 * xi_stride] = -f[r][1];
            }
          }
        }
      }
    };
    run_planes(samples * outs, tiles, planes);
  });
}

}  // namespace mt
