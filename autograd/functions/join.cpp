// Differentiable joining and splitting: cat, stack, split, chunk. cat's backward hands each input the
// narrow() window of the gradient it filled; stack is unsqueeze + cat; split and chunk return narrow
// views that share one backward node, which writes all the pieces' gradients into one buffer
// (Note [One gradient for split pieces]).
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

// y = cat(x₀, x₁, ...) along dim   =>   dxᵢ = dy[offsetᵢ : offsetᵢ + sizeᵢ] along dim
// (a (0) input that cat skipped gets an empty (0) gradient: Note [Cat skips 1-D empties])
struct CatBackward final : Node {
  int64_t dim = 0;
  std::vector<int64_t> sizes;  // each input's extent along dim
  std::vector<bool> skipped;
  TensorList apply(TensorList&& g) override {
    TensorList grads;
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (!next_edges[i].valid()) grads.emplace_back();  // no gradient wanted; its rows still count
      else if (skipped[i]) grads.push_back(empty(Shape{0}, {.dtype = g[0].dtype(), .device = g[0].device()}));
      else grads.push_back(raw::narrow(g[0], dim, offset, sizes[i]));
      offset += sizes[i];  // 0 for a skipped input
    }
    return grads;
  }
  std::string name() const override { return "CatBackward"; }
};

Tensor cat_op(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor y = raw::cat(tensors, dim);
  if (!GradMode::is_enabled()) return y;
  if (std::none_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return detail::requires_grad(t); }))
    return y;
  auto node = std::make_shared<CatBackward>();
  const Tensor& ref = raw::cat_reference(tensors);
  node->dim = wrap_dim(dim, ref.dim(), "cat");
  for (const Tensor& t : tensors) {
    node->skipped.push_back(raw::cat_skips(t) && &t != &ref);
    node->sizes.push_back(node->skipped.back() ? 0 : t.size(node->dim));
    node->next_edges.push_back(detail::requires_grad(t) ? detail::gradient_edge(t) : Edge{});
  }
  set_history(y, node);
  return y;
}

// Note [One gradient for split pieces]: as separate narrow() views, each piece of a split had its own
// slice backward, which returns a zero-filled gradient of x's full shape with the piece's gradient
// copied into its window; the engine then summed those: for the GPT's fused qkv projection, split
// into q, k and v, three zero-filled (B, T, 3C) tensors and two full-size additions, 7.2 ms of a
// 234 ms step (issue 42). So the pieces are the outputs of one node, whose backward allocates x's
// gradient once and copies each piece's gradient into its window: every element written once. A
// piece no gradient reached (unused, or its slot missing) gets zeros in its window, as before.
//   y₀, y₁, ... = split(x) along dim   =>   dx = [dy₀ | dy₁ | ...] along dim
struct SplitBackward final : Node {
  Shape in_shape;
  DType dtype = kFloat32;
  Device device;
  int64_t dim = 0;
  std::vector<int64_t> sizes;  // each piece's extent along dim
  TensorList apply(TensorList&& g) override {
    const auto arrived = [&](size_t i) { return i < g.size() && g[i].defined(); };
    bool all = true;
    for (size_t i = 0; i < sizes.size(); ++i) all = all && arrived(i);
    Tensor dx = all ? empty(in_shape, {.dtype = dtype, .device = device})
                    : zeros(in_shape, {.dtype = dtype, .device = device});
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (arrived(i)) raw::copy_(raw::narrow(dx, dim, offset, sizes[i]), g[i]);
      offset += sizes[i];
    }
    return {dx};
  }
  std::string name() const override { return "SplitBackward"; }
};

}  // namespace

// Under autocast, mixed dtypes are promoted to the widest (Note [Autocast op lists]); stack is cat's.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  return autocast::is_enabled() ? cat_op(autocast::promote(tensors), dim) : cat_op(tensors, dim);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "stack: needs at least one tensor");
  const int d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: tensor ", i, " has shape ", tensors[i].sizes(),
             ", tensor 0 has ", tensors[0].sizes(), "; stack needs equal shapes");
    expanded.push_back(unsqueeze(tensors[i], d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  MT_CHECK(x.dim() > 0, "split: a zero-dimensional tensor cannot be split");
  const int d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    MT_CHECK(s >= 0, "split: sizes must be non-negative, got ", s);
    total += s;
  }
  MT_CHECK(total == x.size(d), "split: the sizes add up to ", total, ", but dim ", d, " of ", x.sizes(), " has ",
           x.size(d));
  std::vector<Tensor> pieces;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    pieces.push_back(raw::narrow(x, d, offset, s));
    offset += s;
  }
  if (auto node = record<SplitBackward>({&x})) {  // Note [One gradient for split pieces]
    node->in_shape = x.sizes(), node->dtype = x.dtype(), node->device = x.device();
    node->dim = d, node->sizes = sizes;
    for (size_t i = 0; i < pieces.size(); ++i) set_history(pieces[i], node, static_cast<uint32_t>(i));
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  MT_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  MT_CHECK(x.dim() > 0, "split: a zero-dimensional tensor cannot be split");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "split"));
  std::vector<int64_t> sizes;
  for (int64_t offset = 0; offset < n; offset += split_size) sizes.push_back(std::min(split_size, n - offset));
  if (sizes.empty()) sizes.push_back(0);  // PyTorch returns one empty piece for an empty dim
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  MT_CHECK(chunks > 0, "chunk: the number of chunks must be positive, got ", chunks);
  MT_CHECK(x.dim() > 0, "chunk: a zero-dimensional tensor cannot be chunked");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "chunk"));
  // PyTorch's rule: pieces of ceil(n / chunks), so there may be fewer than `chunks` of them.
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

}  // namespace mt
