// check_replicas: the replica guard. Data-parallel training keeps one copy of the model per rank and
// relies on every copy staying bit-for-bit the same (same start, same averaged gradient, same update).
// check_replicas hashes every parameter on every rank, gathers the hashes and compares them with rank
// 0's; a divergence (a non-deterministic kernel, a rank that skipped a step, memory corruption, a bug
// in a comm hook) is an error naming the first differing parameter and the ranks that differ, instead
// of a model that quietly depends on which rank saved it.
//
//   dist::check_replicas(*pg, model->named_parameters(), "after epoch 3");   // or ddp->check_replicas(...)
//
// Cost: one pass over the parameters' bytes (on the host; GPU parameters are copied first) and one
// allgather of one int64 per parameter. mini_train runs it at every epoch end, and every K steps with
// --check-replicas K.
//
// Not here: buffers (between two forwards each rank's BatchNorm statistics hold its own batch's
// update, by design; DDP makes every forward start from rank 0's: Note [Buffer broadcast] in
// buffer_sync.cpp), optimizer state, repairing a divergence (re-broadcasting rank 0's values would
// hide the bug the check exists to show).
#pragma once

#include <cstdint>
#include <string>

#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace mt::dist {

// Every rank calls it at the same point (it is a collective). Throws mt::Error on every rank when the
// replicas differ; `when` ("after step 120") goes into the message.
void check_replicas(ProcessGroup& pg, const NamedTensors& parameters, const std::string& when);

// The hash compared: of the tensor's dtype, shape and bytes (contiguous, host), 63 bits.
int64_t replica_hash(const Tensor& t);

}  // namespace mt::dist
