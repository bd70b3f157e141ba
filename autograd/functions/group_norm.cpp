// Group normalisation (F.group_norm): one fused node over the backend's kernel where it has one (the
// CPU's, tensor/cpu/cpu_group_norm.cpp), and elsewhere the composition it replaces, which is also its
// reference (mt::reference::group_norm; Note [Group norm by a kernel]).
//
// Note [Group norm by a kernel]: the composition is the fused layer norm over the rows of
// (N, G, (C/G)·Π*), then the per-channel affine map as a broadcast mul and add. Each of those is a
// pass over x forward and one or two back, and the weight and bias gradients are reductions over
// (N, Π*) of two more products: 0.43× libtorch's speed when issue 40's ops were measured
// (bench/nn_ops.sh). The kernel makes the statistics and the affine output in one node, and its
// backward takes the per-(sample, channel) sums of dy and dy·x̂ from one read, which give dx's
// row terms and the weight and bias gradients at once. The CUDA backend has no such kernel and runs
// the composition (its layer norm kernel, then broadcast ops), and so do the 16-bit dtypes (the
// composition's ops take them; its affine map rounds once more, docs/ops.md). The tests compare
// kernel and composition (tests/autograd/test_group_norm.cpp), each with PyTorch
// (tests/nn/test_norm_attention.cpp), and CUDA with the CPU.
#include "autograd/detail/reference_ops.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

namespace {

void check_group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias) {
  MT_CHECK(x.dim() >= 2, "group_norm: input must be (N, C, ...), got shape ", x.sizes());
  const int64_t c = x.size(1);
  MT_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: num_groups (", num_groups,
           ") must be positive and divide the channels (", c, ") of input ", x.sizes());
  for (const Tensor* t : {&weight, &bias}) {
    MT_CHECK(!t->defined() || t->sizes() == Shape{c}, "group_norm: ", t == &weight ? "weight " : "bias ",
             t->sizes(), " must be (", c, "), the channels of input ", x.sizes());
  }
}

// (1, C, 1, ...) for x: (N, C, ...): a per-channel tensor broadcast against x.
Shape channel_shape(const Tensor& x) {
  Shape s;
  for (int d = 0; d < x.dim(); ++d) s.push_back(d == 1 ? x.size(1) : 1);
  return s;
}

struct GroupNormBackward final : Node {
  SavedTensor x, weight, mean, rstd;
  // y = x̂·w[c] + b[c], x̂ = (x - mean)·rstd per (n, g)   =>   with g = dy·w[c], means over the group:
  //   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dw[c] = Σ_{n,*} dy·x̂,  db[c] = Σ_{n,*} dy
  TensorList apply(TensorList&& g) override {
    check_not_released();
    raw::GroupNormGrads d = raw::group_norm_backward(g[0], x.unpack(*this), weight.unpack(*this),
                                                     mean.unpack(*this), rstd.unpack(*this));
    // An undefined weight or bias has no edge (record skips it): no gradient goes there.
    return {d.dx, next_edges[1].valid() ? d.dweight : Tensor(), next_edges[2].valid() ? d.dbias : Tensor()};
  }
  void release_saved() override { x.reset(), weight.reset(), mean.reset(), rstd.reset(), Node::release_saved(); }
  std::string name() const override { return "GroupNormBackward"; }
};

}  // namespace

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  check_group_norm(x, num_groups, weight, bias);
  if (!raw::group_norm_applies(x)) return reference::group_norm(x, num_groups, weight, bias, eps);
  raw::GroupNormResult r = raw::group_norm(x, num_groups, weight, bias, eps);
  if (auto node = detail::record<GroupNormBackward>({&x, &weight, &bias})) {
    node->x = SavedTensor(x), node->weight = SavedTensor(weight);
    node->mean = SavedTensor(r.mean), node->rstd = SavedTensor(r.rstd);
    detail::set_history(r.out, node);
  }
  return r.out;
}

Tensor reference::group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                             double eps) {
  check_group_norm(x, num_groups, weight, bias);
  // A group's channels and positions are contiguous in (N, C, *): one row each of (N, G, C/G·Π*).
  const int64_t n = x.size(0), row = n * num_groups == 0 ? 0 : x.numel() / (n * num_groups);
  Tensor y = reshape(mt::layer_norm(reshape(x, Shape{n, num_groups, row}), Tensor(), Tensor(), eps), x.sizes());
  if (weight.defined()) y = y * weight.view(channel_shape(y));
  if (bias.defined()) y = y + bias.view(channel_shape(y));
  return y;
}

}  // namespace mt
