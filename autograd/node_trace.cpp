// Names of backward nodes in a trace (see node_trace.h).
#include "autograd/detail/node_trace.h"

#include "autograd/accumulate_grad.h"

namespace mt {

namespace detail {

trace::Span node_span(trace::Tracer& tracer, const Node& node) {
  if (const auto* acc = dynamic_cast<const AccumulateGrad*>(&node)) {
    // The key is the leaf's TensorImpl, which the parameter and its AccumulateGrad share.
    if (const std::string* name = tracer.name_of(acc->leaf().unsafe_impl()))
      return trace::Span(&tracer, "AccumulateGrad " + *name);
  }
  return trace::Span(&tracer, node.name());
}

}  // namespace detail

void trace_parameter_names(trace::Tracer& tracer, const std::vector<std::pair<std::string, Tensor>>& parameters) {
  for (const auto& [name, p] : parameters) tracer.set_name(p.unsafe_impl(), name);
}

}  // namespace mt
