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

std::shared_ptr<Work> ProcessGroupLocal::allreduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  check_reduce(tensor, op, "allreduce");
  const std::string what =
      describe(next_sequence(), "allreduce", describe_tensor(tensor) + ", " + reduce_op_name(op));
  tensor.storage()->bump_version();  // as the real backends do: the tensor was (trivially) written
  return done(what);  // Sum, Avg and Max over one rank leave the tensor as it is
}

std::shared_ptr<Work> ProcessGroupLocal::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  check_root(root, "broadcast");
  const std::string what =
      describe(next_sequence(), "broadcast", describe_tensor(tensor) + ", root " + std::to_string(root));
  tensor.storage()->bump_version();
  return done(what);
}

std::shared_ptr<Work> ProcessGroupLocal::allgather(std::vector<Tensor>& outputs, const Tensor& input) {
  prepare_allgather(outputs, input, "allgather");
  const std::string what = describe(next_sequence(), "allgather", describe_tensor(input));
  std::memcpy(outputs[0].raw_data(), input.raw_data(), input.numel() * element_size(input.dtype()));
  outputs[0].storage()->bump_version();
  return done(what);
}

// Over one rank both flat collectives copy the input to the output (nothing, when in place).
namespace {
void copy_flat(Tensor& output, const Tensor& input) {
  if (output.raw_data() != input.raw_data())
    std::memcpy(output.raw_data(), input.raw_data(), input.numel() * element_size(input.dtype()));
  output.storage()->bump_version();
}
}  // namespace

std::shared_ptr<Work> ProcessGroupLocal::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_flat(output, input, "reduce_scatter");
  check_reduce(output, op, "reduce_scatter");
  MT_CHECK(op != ReduceOp::Max, "reduce_scatter: Max is not supported (Sum, Avg)");
  const std::string what =
      describe(next_sequence(), "reduce_scatter", describe_tensor(input) + ", " + reduce_op_name(op));
  copy_flat(output, input);
  return done(what);
}

std::shared_ptr<Work> ProcessGroupLocal::allgather_into(Tensor& output, const Tensor& input) {
  check_flat(input, output, "allgather_into");
  const std::string what = describe(next_sequence(), "allgather_into", describe_tensor(input));
  copy_flat(output, input);
  return done(what);
}

std::shared_ptr<Work> ProcessGroupLocal::barrier() { return done(describe(next_sequence(), "barrier", "")); }

}  // namespace mt::dist
