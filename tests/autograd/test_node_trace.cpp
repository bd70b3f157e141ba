// The engine's marks in a trace (autograd/detail/node_trace.h, trace/tracer.h): one span per node run,
// named by op and AccumulateGrad by parameter, nested inside the caller's span; nothing outside
// the step range; memory bounded by max_events.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/detail/node_trace.h"
#include "minitrain.h"
#include "trace/tracer.h"

using namespace mt;

namespace {

// The names of the 'X' events of a tracer's JSON, in the order written (by time).
std::vector<std::string> span_names(const trace::Tracer& t) {
  const std::string json = t.events_json(0);
  std::vector<std::string> names;
  for (size_t at = json.find("{\"name\":\""); at != std::string::npos; at = json.find("{\"name\":\"", at + 1)) {
    const size_t begin = at + 9, end = json.find('"', begin);
    if (json.compare(end, 12, "\",\"ph\":\"X\",\"") == 0) names.push_back(json.substr(begin, end - begin));
  }
  return names;
}

}  // namespace

TEST_CASE("trace: every backward node is a span, AccumulateGrad named by its parameter") {
  // loss = sum(w * x): MulBackward, SumBackward, and w's AccumulateGrad
  Tensor w = from_vector(std::vector<float>{1, 2}, {2}, {.requires_grad = true});
  const Tensor x = from_vector(std::vector<float>{3, 4}, {2});
  trace::Tracer tracer({.first_step = 2, .last_step = 2});
  trace_parameter_names(tracer, {{"layer.weight", w}});

  tracer.begin_step(1);  // outside the range: records nothing
  (w * x).sum().backward();
  CHECK(span_names(tracer).empty());

  tracer.begin_step(2);
  {
    trace::Span outer("backward");
    (w * x).sum().backward();
  }
  tracer.begin_step(3);  // after the range: off again
  (w * x).sum().backward();
  const std::vector<std::string> names = span_names(tracer);
  REQUIRE(names.size() == 4);
  CHECK(names[0] == "backward");  // the parent first: same start or earlier, longer
  CHECK(names[3] == "AccumulateGrad layer.weight");  // the last node to run: the leaf
  CHECK(names[1].find("Backward") != std::string::npos);
  CHECK(names[2].find("Backward") != std::string::npos);
  CHECK(trace::active() == nullptr);
}

TEST_CASE("trace: max_events bounds memory, and an unpaired flow is never written") {
  trace::Tracer tracer({.first_step = 1, .last_step = 1, .max_events = 3});
  tracer.begin_step(1);
  for (int i = 0; i < 5; ++i) trace::Span span("s");
  tracer.flow("f", 0, 1, 1, 2);  // both ends would not fit: neither is kept
  tracer.stop();
  CHECK(span_names(tracer).size() == 3);
  CHECK(tracer.dropped() == 4);
  CHECK(tracer.events_json(0).find("\"ph\":\"s\"") == std::string::npos);
}
