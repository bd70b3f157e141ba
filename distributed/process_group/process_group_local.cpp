// ProcessGroupLocal: collectives over a world of one (see process_group_local.h).
#include "distributed/process_group/process_group_local.h"

#include <cstring>

namespace mt::dist {

ProcessGroupLocal::ProcessGroupLocal(std::chrono::milliseconds timeout) : ProcessGroup(0, 1, timeout) {}

std::shared_ptr<Work> ProcessGroupLocal::done(const std::string& description) {
  auto work = std::make_shared<Work>(description, timeout());
  work->finish();
  return work;
}

// Sum, Avg and Max over one rank leave the tensor as it is; broadcast has nothing to send.
std::shared_ptr<Work> ProcessGroupLocal::run_allreduce(Tensor&, ReduceOp, const std::string& what) { return done(what); }

std::shared_ptr<Work> ProcessGroupLocal::run_broadcast(Tensor&, int, const std::string& what) { return done(what); }

std::shared_ptr<Work> ProcessGroupLocal::run_allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                                       const std::string& what) {
  std::memcpy(outputs[0].raw_data(), input.raw_data(), input.numel() * element_size(input.dtype()));
  return done(what);
}

// Over one rank both flat collectives copy the input to the output (nothing, when in place).
namespace {
void copy_flat(Tensor& output, const Tensor& input) {
  if (output.raw_data() != input.raw_data())
    std::memcpy(output.raw_data(), input.raw_data(), input.numel() * element_size(input.dtype()));
}
}  // namespace

std::shared_ptr<Work> ProcessGroupLocal::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp,
                                                            const std::string& what) {
  copy_flat(output, input);
  return done(what);
}

std::shared_ptr<Work> ProcessGroupLocal::run_allgather_into(Tensor& output, const Tensor& input,
                                                            const std::string& what) {
  copy_flat(output, input);
  return done(what);
}

std::shared_ptr<Work> ProcessGroupLocal::run_barrier(const std::string& what) { return done(what); }

}  // namespace mt::dist
