// broadcast_buffers: copies rank 0's module buffers (BatchNorm's running statistics, anything
// registered with Module::register_buffer) to every rank. DDP calls it before each forward in
// training mode when DDPOptions::broadcast_buffers is on (Note [Buffer broadcast] in buffer_sync.cpp);
// a C++ program without DDP may call it itself. It is a collective: every rank calls it at the same
// point, with the same buffers (same names, shapes, dtypes: DDP's constructor has checked the
// parameters, and the buffers come from the same model code).
//
// Not here: coalescing the buffers into one flat tensor per dtype, as PyTorch does (one broadcast
// per buffer, all issued before the first wait), and averaging buffers instead of copying rank 0's.
#pragma once

#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace mt::dist {

// Every rank ends with rank 0's values of `buffers`, written in place (the module keeps its tensors).
// A world of one, or no buffers, returns at once without a collective.
void broadcast_buffers(ProcessGroup& pg, const NamedTensors& buffers);

}  // namespace mt::dist
