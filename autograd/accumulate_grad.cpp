// AccumulateGrad, the autograd metadata of tensors, and the edge lookup differentiable ops use.
#include "autograd/accumulate_grad.h"

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "autograd/record.h"
#include "tensor/memory.h"
#include "tensor/raw_ops.h"
#include "tensor/small_blocks.h"

namespace mt {

namespace detail {

AutogradMeta& autograd_meta(const Tensor& t) {
  TensorImpl* impl = t.unsafe_impl();
  if (!impl->autograd) impl->autograd = make_small<AutogradMeta>();
  return *impl->autograd;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta& m = autograd_meta(t);
  if (m.grad_fn) return Edge{m.grad_fn, m.output_nr};
  if (!m.requires_grad) return Edge{};
  // A leaf: reuse its accumulator while any graph holds it, else make a new one.
  std::shared_ptr<AccumulateGrad> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = make_small<AccumulateGrad>(t);
    m.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

Tensor reduce_grad(const Tensor& grad, const InputInfo& input) {
  Tensor g = raw::sum_to(grad, input.shape);
  return g.dtype() == input.dtype ? g : raw::cast(g, input.dtype);
}

}  // namespace detail

void set_grad_destination(const Tensor& leaf, const Tensor& destination) {
  MT_CHECK(leaf.is_leaf() && leaf.requires_grad(), "set_grad_destination: the tensor must be a leaf that "
           "requires grad");
  MT_CHECK(!destination.defined() || (destination.sizes() == leaf.sizes() && destination.dtype() == leaf.dtype() &&
                                      destination.device() == leaf.device()),
           "set_grad_destination: the destination must match the leaf: expected ", leaf.sizes(), " ",
           leaf.dtype(), " on ", leaf.device(), ", got ", destination.sizes(), " ", destination.dtype(), " on ",
           destination.device());
  detail::autograd_meta(leaf).grad_destination = destination;
}

void set_grad_destination_scale(const Tensor& leaf, double scale) {
  detail::autograd_meta(leaf).destination_scale = scale;
}

bool take_destination_scaled(const Tensor& leaf) {
  AutogradMeta& m = detail::autograd_meta(leaf);
  const bool scaled = m.destination_scaled;
  m.destination_scaled = false;
  return scaled;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor& g = grads[0];
  if (!g.defined()) return {};
  // The engine checked g against slot_meta(0): the leaf as it was when this node was made. Module::to
  // may have converted the leaf since (Note [Module::to keeps parameter identity]).
  const GradMeta& made_for = slot_meta(0);
  MT_CHECK(made_for.matches(leaf_), "AccumulateGrad: a leaf of shape ", leaf_.sizes(), " was converted "
           "from ", made_for.dtype, " on ", made_for.device, " to ", leaf_.dtype(), " on ", leaf_.device(),
           " after this graph was recorded; run the forward again after Module::to");
  AutogradMeta& m = detail::autograd_meta(leaf_);
  if (!m.grad.defined() && m.grad_destination.defined()) {
    // Written straight where its owner wants it; no zeroing pass (Note [Gradient destination]),
    // scaled on the way when asked (Note [Dividing while writing]).
    if (m.destination_scale == 1.0) {
      raw::copy_(m.grad_destination, g);
    } else {
      raw::unary_into(UnaryOp::MulScalar, m.grad_destination, g, m.destination_scale);
      m.destination_scaled = true;
    }
    m.grad = m.grad_destination;
  } else if (!m.grad.defined()) {
    // The incoming tensor may alias another gradient (add's backward hands one tensor to both
    // inputs), so the leaf gets its own contiguous copy -- unless nothing else can see it (the
    // common case: a fresh result of the backward formula), and then it is taken as it is. That
    // saves a copy the size of the parameter on every step after zero_grad(set_to_none).
    m.grad = g.is_sole_owner() ? std::move(g) : raw::clone(g);
    // Made as an activation's gradient, kept as the leaf's: counted as gradients from here on
    // (Note [Memory kinds] in tensor/memory.h; DDP's buckets are counted so from the start).
    if (const Storage& bytes = *m.grad.storage(); bytes.device().is_cpu())
      set_memory_kind(bytes.data(), bytes.nbytes(), MemoryKind::kGradients);
  } else {
    // In place: if .grad is a view into a bigger buffer (DDP's bucket), the sum lands there.
    raw::binary_(BinaryOp::Add, m.grad, g);
  }
  for (auto& hook : m.post_accumulate_grad_hooks) hook(leaf_);
  return {};
}

}  // namespace mt
