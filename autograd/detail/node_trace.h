// The engine's marks in a trace (trace/tracer.h): one span per backward node, named by its op
// ("MulBackward"), and for a leaf's AccumulateGrad by the parameter it accumulates into
// ("AccumulateGrad fc1.weight") when someone told the tracer the parameters' names. DDP's ready
// hooks run inside that span, so a bucket's flow arrow starts at the gradient that completed it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "trace/tracer.h"

namespace mt {

namespace detail {
trace::Span node_span(trace::Tracer& tracer, const Node& node);
}  // namespace detail

// A span for running `node`; off, an empty one (Note [Free when off] in trace/tracer.h).
inline trace::Span trace_node(const Node& node) {
  trace::Tracer* t = trace::active();
  if (t == nullptr) [[likely]]
    return trace::Span();
  return detail::node_span(*t, node);
}

// Tells `tracer` the names of these parameters, for their AccumulateGrad spans.
void trace_parameter_names(trace::Tracer& tracer, const std::vector<std::pair<std::string, Tensor>>& parameters);

}  // namespace mt
