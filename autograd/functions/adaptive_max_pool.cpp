// adaptive_max_pool2d, composed from gather and argmax, so its backward is gather's (a scatter_add
// of each output's gradient onto the element that won), with no kernel of its own.
//
// Note [Adaptive bins as a gather]: output cell (i, j) covers the input rows [floor(i·H/OH),
// ceil((i+1)·H/OH)) and the columns alike (PyTorch's bins; neighbouring bins may overlap). Its
// elements' plane positions h·W + w, in row-major order, form row l = i·OW + j of a host-built table
// (L, K), K the largest bin; a smaller bin repeats its first position to fill the row, which cannot
// change the maximum, and since argmax keeps the first of equal values it does not change the
// winner either. One gather reads every bin of every plane, (N·C, L·K); argmax over K picks each
// bin's winner in the order PyTorch's loop scans it; a second gather takes the winners' values.
#include <algorithm>

#include "autograd/ops.h"
#include "autograd/spatial_ops.h"
#include "tensor/raw_ops.h"

namespace mt {

namespace {

struct BinTable {
  std::vector<int64_t> positions;  // (L, K) row-major
  int64_t bins = 0, width = 0;     // L, K
};

BinTable bin_table(int64_t h, int64_t w, Size2 out) {
  const auto start = [](int64_t i, int64_t in, int64_t n) { return i * in / n; };
  const auto end = [](int64_t i, int64_t in, int64_t n) { return ((i + 1) * in + n - 1) / n; };
  int64_t kh = 0, kw = 0;
  for (int64_t i = 0; i < out.h; ++i) kh = std::max(kh, end(i, h, out.h) - start(i, h, out.h));
  for (int64_t j = 0; j < out.w; ++j) kw = std::max(kw, end(j, w, out.w) - start(j, w, out.w));
  BinTable t{.bins = out.h * out.w, .width = kh * kw};
  for (int64_t i = 0; i < out.h; ++i)
    for (int64_t j = 0; j < out.w; ++j) {
      const size_t row = t.positions.size();
      for (int64_t r = start(i, h, out.h); r < end(i, h, out.h); ++r)
        for (int64_t c = start(j, w, out.w); c < end(j, w, out.w); ++c) t.positions.push_back(r * w + c);
      t.positions.resize(row + t.width, t.positions[row]);  // fill with the bin's first position
    }
  return t;
}

std::pair<Tensor, Tensor> adaptive_max_pool2d_batched(const Tensor& x, Size2 out) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  MT_CHECK(h > 0 && w > 0, "adaptive_max_pool2d: input of shape ", x.sizes(), " has an empty plane");
  const BinTable t = bin_table(h, w, out);
  const int64_t planes = n * c;
  const Tensor table = from_vector(t.positions, {1, t.bins * t.width}, {.dtype = kInt64, .device = x.device()});
  const Tensor flat = reshape(x, Shape{planes, h * w});
  // (N·C, L, K): every bin's elements; the winner's k, then its plane position h·W + w.
  const Tensor candidates = raw::gather(flat, 1, raw::expand(table, Shape{planes, t.bins * t.width}));
  const Tensor k = raw::argmax(raw::view(candidates, Shape{planes, t.bins, t.width}), 2, /*keepdim=*/true);
  const Tensor positions = raw::gather(raw::expand(raw::view(table, Shape{1, t.bins, t.width}),
                                                   Shape{planes, t.bins, t.width}), 2, k);  // (N·C, L, 1)
  const Tensor indices = raw::view(positions, Shape{planes, t.bins});
  const Shape shape{n, c, out.h, out.w};
  return {reshape(gather(flat, 1, indices), shape), raw::view(indices, shape)};
}

}  // namespace

std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Size2 output_size) {
  MT_CHECK(x.dim() == 4 || x.dim() == 3, "adaptive_max_pool2d: input must be (N, C, H, W) or (C, H, W), got shape ",
           x.sizes());
  MT_CHECK(output_size.h > 0 && output_size.w > 0, "adaptive_max_pool2d: output size must be positive, got ",
           output_size);
  MT_CHECK(is_floating(x.dtype()), "adaptive_max_pool2d: needs a floating dtype, got ", x.dtype());
  if (x.dim() == 4) return adaptive_max_pool2d_batched(x, output_size);
  auto [y, indices] = adaptive_max_pool2d_batched(unsqueeze(x, 0), output_size);
  return {squeeze(y, 0), raw::squeeze(indices, 0)};
}

Tensor adaptive_max_pool2d(const Tensor& x, Size2 output_size) {
  return adaptive_max_pool2d_with_indices(x, output_size).first;
}

}  // namespace mt
