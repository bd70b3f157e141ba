// ProcessGroupNCCL in a library without NCCL (no CUDA backend, no NCCL found, or the CPU library of a
// CUDA build): the same class, whose constructor says how to get NCCL. CMakeLists.txt compiles this
// file instead of process_group_nccl.cpp there.
#include "distributed/process_group/nccl/process_group_nccl.h"

namespace mt::dist {

namespace detail {
struct NcclComm {};
}

bool ProcessGroupNCCL::is_available() { return false; }

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupNCCLOptions opts)
    : ProcessGroup(rank, size, opts.timeout, Device(DeviceType::CUDA, opts.device)) {
  MT_FAIL("this build of minitrain has no NCCL backend: it needs the CUDA backend (nvcc) and NCCL "
          "(nccl.h, libnccl); install NCCL or set NCCL_ROOT, then reconfigure with -DMT_NCCL=ON");
}
ProcessGroupNCCL::~ProcessGroupNCCL() = default;
std::shared_ptr<Work> ProcessGroupNCCL::run_allreduce(Tensor&, ReduceOp, const std::string&) {
  MT_FAIL("no NCCL backend");
}
std::shared_ptr<Work> ProcessGroupNCCL::run_broadcast(Tensor&, int, const std::string&) {
  MT_FAIL("no NCCL backend");
}
std::shared_ptr<Work> ProcessGroupNCCL::run_allgather(std::vector<Tensor>&, const Tensor&, const std::string&) {
  MT_FAIL("no NCCL backend");
}
std::shared_ptr<Work> ProcessGroupNCCL::run_barrier(const std::string&) { MT_FAIL("no NCCL backend"); }
std::shared_ptr<Work> ProcessGroupNCCL::run_reduce_scatter(Tensor&, const Tensor&, ReduceOp, const std::string&) {
  MT_FAIL("no NCCL backend");
}
std::shared_ptr<Work> ProcessGroupNCCL::run_allgather_into(Tensor&, const Tensor&, const std::string&) {
  MT_FAIL("no NCCL backend");
}

}  // namespace mt::dist
