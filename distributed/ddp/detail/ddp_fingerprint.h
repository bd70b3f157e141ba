// DDP's first check at construction: every rank has the same parameters (names, shapes, dtypes in
// the same order). Without it a mismatch would show up later as buckets of different sizes, i.e. a
// failed or hung all-reduce far away from its cause. Not here: comparing values (that is the
// replica guard, replica_guard.h).
#pragma once

#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace mt::dist {

// A collective: gathers every rank's fingerprint (one "name [shape] dtype" line per parameter) and
// compares it with rank 0's; throws on every rank that differs, naming the first differing
// parameter, rank 0's line and its own.
void check_same_parameters(ProcessGroup& pg, const NamedTensors& params);

}  // namespace mt::dist
