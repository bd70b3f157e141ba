// --trace and --trace-steps (see tracing.h).
#include "apps/mini_train/tracing.h"

#include <cstdio>
#include <cstdlib>

#include "autograd/detail/node_trace.h"
#include "distributed/trace/trace_job.h"
#include "tensor/check.h"

namespace mt::app {

trace::TracerOptions parse_trace_steps(const std::string& spec) {
  const size_t colon = spec.find(':');
  long long a = 0, b = 0;
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < spec.size();
  if (ok) {
    char* end = nullptr;
    a = std::strtoll(spec.c_str(), &end, 10);
    ok = end == spec.c_str() + colon;
    b = std::strtoll(spec.c_str() + colon + 1, &end, 10);
    ok = ok && *end == '\0';
  }
  MT_CHECK(ok, "--trace-steps: '", spec, "' is not A:B (two step numbers, e.g. 2:4)");
  MT_CHECK(a >= 1 && a <= b && b - a + 1 <= kMaxTracedSteps, "--trace-steps ", spec, ": need 1 <= A <= B and at most ",
           kMaxTracedSteps, " steps (a trace keeps every event of its steps in memory)");
  return {.first_step = a, .last_step = b};
}

std::unique_ptr<trace::Tracer> start_trace(const std::string& steps, dist::ProcessGroup* pg, const nn::Module& model) {
  std::unique_ptr<trace::Tracer> tracer = dist::start_job_trace(pg, parse_trace_steps(steps));
  trace_parameter_names(*tracer, model.named_parameters());
  return tracer;
}

void finish_trace(trace::Tracer& tracer, dist::ProcessGroup* pg, const std::string& path, bool talk) {
  dist::write_job_trace(tracer, pg, path);
  if (!talk) return;
  const trace::TracerOptions& o = tracer.options();
  std::printf("trace: steps %lld:%lld of every rank in %s (ui.perfetto.dev; scripts/trace_to_svg.py)\n",
              static_cast<long long>(o.first_step), static_cast<long long>(o.last_step), path.c_str());
  if (tracer.dropped() > 0)
    std::printf("trace: rank 0 dropped %zu events over the limit of %zu; trace fewer steps\n", tracer.dropped(),
                o.max_events);
  std::fflush(stdout);
}

}  // namespace mt::app
