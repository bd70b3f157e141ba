// One unit of FullyShardedDataParallel (distributed/zero/fsdp.h): what it holds between and during
// its forward and backward. Shared by fsdp.cpp (gather, free, forward) and fsdp_backward.cpp
// (pre-backward gather, reduce-scatter, finalize).
#pragma once

#include <memory>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "distributed/zero/fsdp.h"
#include "trace/tracer.h"

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
  int64_t gather_issued_ns = 0, scatter_issued_ns = 0;  // --trace only (trace_collective); 0: not traced
};

// Note [FSDP on the trace]: while a trace records, each unit's all-gathers and reduce-scatters are
// spans on a track of the unit's own ("fsdp unit u"), from when the collective was issued to when
// the wait for it returned, with an arrow from its end to the compute track, where the forward or
// backward that waited for it goes on. A long span that ends in an arrow straight into the compute
// track is communication prefetch did not hide. Off, issuing costs one branch.
inline int64_t trace_issue_ns() { return trace::active() != nullptr ? trace::now_ns() : 0; }
void trace_collective(size_t unit, const char* what, int64_t issued_ns);

}  // namespace mt::dist
