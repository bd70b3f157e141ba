// Helpers every differentiable op uses to record itself (internal to autograd/).
//   Tensor y = raw::op(x);
//   if (auto node = detail::record<OpBackward>({&x})) { node->saved = ...; detail::set_history(y, node); }
// record() returns null when grad mode is off or no input requires grad: then nothing is allocated.
#pragma once

#include <initializer_list>
#include <memory>

#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "tensor/small_blocks.h"

namespace mt::detail {

inline bool requires_grad(const Tensor& t) {
  const AutogradMeta* m = t.defined() ? autograd_meta_or_null(t) : nullptr;
  return m && (m->requires_grad || m->grad_fn);
}

template <typename NodeT, typename... Args>
std::shared_ptr<NodeT> record(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  if (!GradMode::is_enabled()) return nullptr;
  bool any = false;
  for (const Tensor* t : inputs) any = any || requires_grad(*t);
  if (!any) return nullptr;
  auto node = make_small<NodeT>(std::forward<Args>(args)...);
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(requires_grad(*t) ? gradient_edge(*t) : Edge{});
  return node;
}

// Makes `out` the output_nr-th result of node; out's shape, dtype and device become what the
// gradient arriving there must have.
inline void set_history(const Tensor& out, std::shared_ptr<Node> node, uint32_t output_nr = 0) {
  node->set_slot_meta(output_nr, out);
  AutogradMeta& m = autograd_meta(out);
  m.grad_fn = std::move(node);
  m.output_nr = output_nr;
}

// What an op remembers about an input to shape its gradient: the broadcasting and dtype promotion
// of the forward are undone in the backward (sum back down, cast back).
struct InputInfo {
  Shape shape;
  DType dtype = kFloat32;
  InputInfo() = default;
  explicit InputInfo(const Tensor& t) : shape(t.sizes()), dtype(t.dtype()) {}
};
Tensor reduce_grad(const Tensor& grad, const InputInfo& input);

}  // namespace mt::detail
