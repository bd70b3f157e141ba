// AutogradMeta: what autograd keeps on a tensor. Created lazily: a tensor that nobody asked to
// track has none, so raw math on plain tensors pays nothing for autograd.
//   leaf with requires_grad: requires_grad = true, grad_fn = null, grad accumulates here.
//   result of a differentiable op on tracked inputs: grad_fn = the op's Node, output_nr = which output.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "tensor/tensor.h"

namespace mt {

class AccumulateGrad;

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  // A leaf's AccumulateGrad node, made on first use and shared by every graph that uses the leaf.
  // Weak: the graph owns it; the leaf only finds it again.
  std::weak_ptr<AccumulateGrad> grad_accumulator;
  std::vector<std::function<void(const Tensor&)>> post_accumulate_grad_hooks;
  // Note [Gradient destination]: where a leaf's gradient lives when someone else owns the memory
  // (DDP's bucket view). The first accumulation into an undefined .grad writes the gradient into it
  // and makes it .grad; zero_grad(set_to_none) just forgets .grad. Undefined: .grad is the engine's.
  Tensor grad_destination;
  // Note [Dividing while writing]: the first gradient written into the destination is multiplied
  // by this on the way (one pass instead of a copy and a scaling), and `destination_scaled` says it
  // was, until its owner takes the flag (take_destination_scaled). DDP sets 1/world before a
  // synced backward: each gradient then arrives in its bucket already divided (Note [Averaging]).
  double destination_scale = 1.0;
  bool destination_scaled = false;
};

namespace detail {
// The meta of t, created if missing.
AutogradMeta& autograd_meta(const Tensor& t);
// The meta of t or null.
inline AutogradMeta* autograd_meta_or_null(const Tensor& t) { return t.unsafe_impl()->autograd.get(); }
}  // namespace detail

}  // namespace mt
