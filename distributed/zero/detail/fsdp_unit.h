// One unit of FullyShardedDataParallel (distributed/zero/fsdp.h): what it holds between and during
// its forward and backward. Shared by fsdp.cpp (gather, free, forward) and fsdp_backward.cpp
// (pre-backward gather, reduce-scatter, finalize).
#pragma once

#include <memory>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "distributed/zero/fsdp.h"

namespace mt::dist {

struct FullyShardedDataParallel::Unit {
  enum class State { Free, Gathering, Gathered };
  nn::Module* module = nullptr;    // null for the root unit
  std::vector<Tensor> params;      // the model's parameters of this unit, in layout order
  std::shared_ptr<Storage> flat;   // N·shard elements that every parameter is a view of; released while Free
  Tensor shard;                    // (shard) this rank's values: what the optimizer updates
  State state = State::Free;
  Tensor gathering;                // while Gathering: the all-gather's output, whose bytes flat takes
  std::shared_ptr<Work> gather_work;
  // Backward: the flat gradients being reduce-scattered (Note [Reduce-scatter of a unit]), the
  // reduce-scatter in flight and its output, and how many parameters still await a gradient.
  Tensor grad_flat, scattering, shard_grad;
  std::shared_ptr<Work> scatter_work;
  size_t pending = 0;
  bool launched = false;
};

}  // namespace mt::dist
