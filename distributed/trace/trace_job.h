// One trace for a whole data-parallel job: every rank's Tracer (trace/tracer.h) on one time axis,
// gathered by rank 0 into one Chrome-trace / Perfetto JSON file ("traceEvents" array format; load it
// in ui.perfetto.dev or chrome://tracing). Rank r is process r ("rank r"), with a compute track and a
// track per DDP bucket (distributed/ddp/detail/ddp_trace.h).
//
//   std::unique_ptr<trace::Tracer> tracer = dist::start_job_trace(pg.get(), {.first_step = 1, .last_step = 3});
//   ... train, calling tracer->begin_step(step) ...
//   dist::write_job_trace(*tracer, pg.get(), "trace.json");   // every rank; rank 0 writes
//
// Both are collectives when pg is set (every rank calls them at the same point); pg null is a
// world of one. What the clocks are and how they are aligned: Note [Aligning the ranks' clocks].
#pragma once

#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"
#include "trace/tracer.h"

namespace mt::dist {

// A tracer for this rank, its clock aligned with rank 0's (a few collectives).
std::unique_ptr<trace::Tracer> start_job_trace(ProcessGroup* pg, trace::TracerOptions options = {});

// Stops recording, gathers every rank's events on rank 0 and writes them to `path` there, atomically
// (Note [Output files] in tensor/output_file.cpp). Every rank calls it; only rank 0 touches the file.
void write_job_trace(trace::Tracer& tracer, ProcessGroup* pg, const std::string& path);

}  // namespace mt::dist
