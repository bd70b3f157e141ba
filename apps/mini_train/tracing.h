// mini_train's --trace FILE and --trace-steps A:B: a Chrome-trace / Perfetto JSON of steps A..B of
// every rank (distributed/trace/trace_job.h), written by rank 0 when training ends. The trainer marks its
// phases (data, step, forward, backward, optimizer, checkpoint); the engine and DDP mark the rest.
// scripts/trace_to_svg.py draws one step of such a file (docs/ddp.md).
#pragma once

#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"
#include "nn/module.h"
#include "trace/tracer.h"

namespace mt::app {

// "A:B" (1 <= A <= B, at most kMaxTracedSteps steps) as tracer options; anything else is an error
// naming --trace-steps.
trace::TracerOptions parse_trace_steps(const std::string& spec);
inline constexpr int64_t kMaxTracedSteps = 1000;

// Every rank, after the process group and the model exist (a collective: clock alignment). The
// --trace path was checked with the other outputs before (outputs.h), so a bad one fails before
// training, not after.
std::unique_ptr<trace::Tracer> start_trace(const std::string& steps, dist::ProcessGroup* pg, const nn::Module& model);

// Every rank, when training ends: rank 0 writes `path` and, when `talk`, says so.
void finish_trace(trace::Tracer& tracer, dist::ProcessGroup* pg, const std::string& path, bool talk);

}  // namespace mt::app
