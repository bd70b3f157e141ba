// AccumulateGrad: the node at the end of every path to a leaf that requires grad. It adds the
// incoming gradient into leaf.grad, then runs the leaf's post-accumulate-grad hooks, in
// registration order. Those hooks are where DDP learns that a parameter's gradient is ready.
#pragma once

#include "autograd/node.h"

namespace mt {

class AccumulateGrad final : public Node {
 public:
  // The leaf's shape, dtype and device are what every gradient into it must have (the engine checks).
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) { set_slot_meta(0, leaf_); }
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  void release_saved() override {}  // holds nothing per-backward; reusable across backwards
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

namespace detail {
// The edge a differentiable op uses for input t: its grad_fn, its leaf's AccumulateGrad, or none.
Edge gradient_edge(const Tensor& t);
}  // namespace detail

// Note [Gradient destination] (autograd_meta.h): from now on, the first gradient into leaf's
// undefined .grad is written into `destination` (same shape, dtype and device as leaf), which then
// is .grad. An undefined destination gives .grad back to the engine. DDP registers its bucket views.
void set_grad_destination(const Tensor& leaf, const Tensor& destination);
// Note [Dividing while writing] (autograd_meta.h): the scale the next gradient written into the
// destination is multiplied by (1: a plain copy); and whether the last one was scaled, which this
// call clears.
void set_grad_destination_scale(const Tensor& leaf, double scale);
bool take_destination_scaled(const Tensor& leaf);

}  // namespace mt
