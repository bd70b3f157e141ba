// The graph walk behind find_unused_parameters (see unused_parameters.h).
#include "distributed/ddp/detail/unused_parameters.h"

#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"

namespace mt::dist::detail {

// A leaf's AccumulateGrad is the node every path to it ends in (accumulate_grad.h); the leaf keeps a
// weak pointer to it (AutogradMeta::grad_accumulator), so "reached" = "that node was visited". The
// walk is iterative: a deep model's graph would overflow the stack of a recursive one. Each node is
// visited once, however many paths lead to it (a reused activation, tied weights).
std::vector<bool> reached_from(const Tensor& output, const std::vector<Tensor>& parameters) {
  std::unordered_set<const Node*> visited;
  std::vector<const Node*> stack;
  if (output.requires_grad()) {
    const Edge root = mt::detail::gradient_edge(output);
    if (root.valid()) stack.push_back(root.fn.get());
  }
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (!visited.insert(node).second) continue;
    for (const Edge& e : node->next_edges)
      if (e.valid() && !visited.count(e.fn.get())) stack.push_back(e.fn.get());
  }
  std::vector<bool> reached;
  for (const Tensor& p : parameters) {
    const AutogradMeta* meta = mt::detail::autograd_meta_or_null(p);
    const std::shared_ptr<AccumulateGrad> acc = meta ? meta->grad_accumulator.lock() : nullptr;
    reached.push_back(acc != nullptr && visited.count(acc.get()) > 0);
  }
  return reached;
}

}  // namespace mt::dist::detail
