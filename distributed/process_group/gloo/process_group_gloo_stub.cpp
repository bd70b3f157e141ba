// ProcessGroupGloo in a build without Gloo: the same class, whose constructor says how to get Gloo.
// cmake/Components.cmake compiles this file instead of process_group_gloo.cpp and gloo_connect.cpp
// when CMake did not find Gloo, so the component minitrain::gloo exists in every build.
#include "distributed/process_group/gloo/process_group_gloo.h"

#include "distributed/process_group/detail/collective_queue.h"  // the destructor deletes the (absent) queue

namespace mt::dist {

struct ProcessGroupGloo::Gloo {};

bool ProcessGroupGloo::is_available() { return false; }

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupGlooOptions opts)
    : ProcessGroup(rank, size, opts.timeout) {
  MT_FAIL("this build of minitrain has no Gloo backend: CMake did not find Gloo (Debian: apt install "
          "libgloo-dev, then reconfigure)");
}
ProcessGroupGloo::~ProcessGroupGloo() = default;
std::shared_ptr<Work> ProcessGroupGloo::run_allreduce(Tensor&, ReduceOp, const std::string&) {
  MT_FAIL("no Gloo backend");
}
std::shared_ptr<Work> ProcessGroupGloo::run_broadcast(Tensor&, int, const std::string&) {
  MT_FAIL("no Gloo backend");
}
std::shared_ptr<Work> ProcessGroupGloo::run_allgather(std::vector<Tensor>&, const Tensor&, const std::string&) {
  MT_FAIL("no Gloo backend");
}
std::shared_ptr<Work> ProcessGroupGloo::run_barrier(const std::string&) { MT_FAIL("no Gloo backend"); }
std::shared_ptr<Work> ProcessGroupGloo::run_reduce_scatter(Tensor&, const Tensor&, ReduceOp, const std::string&) {
  MT_FAIL("no Gloo backend");
}
std::shared_ptr<Work> ProcessGroupGloo::run_allgather_into(Tensor&, const Tensor&, const std::string&) {
  MT_FAIL("no Gloo backend");
}
std::shared_ptr<Work> ProcessGroupGloo::run_allreduce_if(Tensor&, ReduceOp, const std::string&, std::function<bool()>) {
  MT_FAIL("no Gloo backend");
}
void ProcessGroupGloo::allreduce_now(const Tensor&, ReduceOp) { MT_FAIL("no Gloo backend"); }

}  // namespace mt::dist
