// Which parameters a forward's output can reach in the autograd graph: the ones that can get a
// gradient from a backward through that output. DDP asks after its forward, with
// find_unused_parameters, so that the others count as ready when backward starts (Note [Unused
// parameters found after forward] in reducer.cpp). Only a graph walk: nothing runs and nothing changes.
//
// Not here: parameters reached through a path whose gradient turns out undefined at run time (a node
// that returns no gradient for an input); those are found in finalize, as before (Note [Finalize]).
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace mt::dist::detail {

// reached[i]: parameters[i]'s AccumulateGrad node is on some path from output's grad_fn (or output
// is parameters[i] itself). A parameter that no graph has used yet has no such node, so it is not.
std::vector<bool> reached_from(const Tensor& output, const std::vector<Tensor>& parameters);

}  // namespace mt::dist::detail
