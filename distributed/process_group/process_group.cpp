// ProcessGroup's argument checks and collective descriptions, shared by every backend.
#include "distributed/process_group/process_group.h"

#include "distributed/process_group/detail/collective_guard.h"

namespace mt::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "Sum";
    case ReduceOp::Avg: return "Avg";
    case ReduceOp::Max: return "Max";
  }
  return "?";
}

bool is_own_shard(const Tensor& shard, const Tensor& whole, int rank) {
  return shard.numel() > 0 && shard.raw_data() == static_cast<const char*>(whole.raw_data()) +
                                                       static_cast<size_t>(rank) * shard.numel() * element_size(whole.dtype());
}

std::string describe_tensor(const Tensor& t) {
  return std::to_string(t.numel()) + " " + dtype_name(t.dtype());
}

ProcessGroup::ProcessGroup(int rank, int size, std::chrono::milliseconds timeout, Device device)
    : rank_(rank), size_(size), timeout_(timeout), device_(device) {
  MT_CHECK(size >= 1 && rank >= 0 && rank < size, "process group: rank ", rank, " is not in [0, ", size, ")");
  MT_CHECK(timeout.count() > 0, "process group: timeout must be positive, got ", format_ms(timeout));
}

std::string ProcessGroup::number(const std::string& what, const std::string& detail) {
  return what + " #" + std::to_string(++issued_) + (detail.empty() ? "" : " (" + detail + ")") + " on rank " +
         std::to_string(rank_) + " of " + std::to_string(size_);
}

// Note [One opening for every collective]: every collective starts the same way on every backend:
// check the arguments (so a wrong call fails here, on this rank, before anything reaches the wire),
// number it (Note [Collective order]: the same number on every rank names the same collective in
// messages and in the desync guard's reports), and bump the version of each tensor it will write
// (the backend writes raw memory, outside autograd, so a backward that saved the old value must
// refuse to run). The public collectives do that here, once, and then call the backend's run_*,
// which only moves bytes. A backend's own limits (MPI's int counts) stay in its run_*.

std::shared_ptr<Work> ProcessGroup::allreduce(Tensor& tensor, ReduceOp op) { return start_allreduce(tensor, op, true); }

std::shared_ptr<Work> ProcessGroup::allreduce_own_guard(Tensor& tensor, ReduceOp op) {
  return start_allreduce(tensor, op, false);
}

std::shared_ptr<Work> ProcessGroup::start_allreduce(Tensor& tensor, ReduceOp op, bool guard) {
  check_tensor(tensor, "allreduce");
  check_reduce(tensor, op, "allreduce");
  const std::string what = number("allreduce", describe_tensor(tensor) + ", " + reduce_op_name(op));
  tensor.storage()->bump_version();
  if (!guard || !detail::allreduce_is_guarded(*this, tensor, op)) return run_allreduce(tensor, op, what);
  // The all-reduce runs on a copy with a guard at its end (Note [Collective guard]).
  return detail::guarded_allreduce(
      *this, tensor, op, static_cast<int64_t>(issued_), [&](Tensor& wire) { return run_allreduce(wire, op, what); },
      [&](Tensor& whole, std::function<bool()> proceed) { return run_allreduce_if(whole, op, what, std::move(proceed)); });
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  check_root(root, "broadcast");
  const std::string what = number("broadcast", describe_tensor(tensor) + ", root " + std::to_string(root));
  tensor.storage()->bump_version();
  return run_broadcast(tensor, root, what);
}

std::shared_ptr<Work> ProcessGroup::allgather(std::vector<Tensor>& outputs, const Tensor& input) {
  prepare_allgather(outputs, input, "allgather");
  const std::string what = number("allgather", describe_tensor(input));
  for (auto& out : outputs) out.storage()->bump_version();
  return run_allgather(outputs, input, what);
}

std::shared_ptr<Work> ProcessGroup::barrier() { return run_barrier(number("barrier", "")); }

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_flat(output, input, "reduce_scatter");
  check_reduce(output, op, "reduce_scatter");
  MT_CHECK(op != ReduceOp::Max, "reduce_scatter: Max is not supported (Sum, Avg)");
  const std::string what = number("reduce_scatter", describe_tensor(input) + ", " + reduce_op_name(op));
  output.storage()->bump_version();
  return run_reduce_scatter(output, input, op, what);
}

std::shared_ptr<Work> ProcessGroup::allgather_into(Tensor& output, const Tensor& input) {
  check_flat(input, output, "allgather_into");
  const std::string what = number("allgather_into", describe_tensor(input));
  output.storage()->bump_version();
  return run_allgather_into(output, input, what);
}

void ProcessGroup::check_tensor(const Tensor& t, const std::string& what) const {
  MT_CHECK(t.defined(), what, ": the tensor is undefined");
  MT_CHECK(t.device() == device_, what, ": the tensor is on ", t.device(), "; the ", backend(), " backend of rank ",
           rank_, " takes tensors on ", device_, device_.is_cuda() ? " (this rank's GPU)" : "", ": move it with "
           "t.to(mt::Device(\"", device_, "\"))");
  MT_CHECK(t.is_contiguous(), what, ": the tensor is not contiguous; pass t.contiguous() and copy the "
           "result back");
  const DType d = t.dtype();
  MT_CHECK(d == kFloat32 || d == kFloat64 || d == kInt64 || is_low_precision(d), what, ": dtype ", d,
           " is not supported (float32, float64, int64, float16, bfloat16)");
}

void ProcessGroup::check_reduce(const Tensor& t, ReduceOp op, const std::string& what) const {
  MT_CHECK(op != ReduceOp::Avg || t.dtype() != kInt64, what, ": Avg of int64 would round; reduce with Sum "
           "and divide, or use a floating dtype");
}

void ProcessGroup::check_root(int root, const std::string& what) const {
  MT_CHECK(root >= 0 && root < size_, what, ": root ", root, " is not a rank of this group (size ", size_, ")");
}

void ProcessGroup::prepare_allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                     const std::string& what) const {
  check_tensor(input, what + " input");
  if (outputs.empty()) {
    for (int r = 0; r < size_; ++r)
      outputs.push_back(empty(input.sizes(), {.dtype = input.dtype(), .device = device_}));
    return;
  }
  MT_CHECK(static_cast<int>(outputs.size()) == size_, what, ": ", outputs.size(), " output tensors for a group "
           "of ", size_, " (pass one per rank, or an empty vector)");
  for (int r = 0; r < size_; ++r) {
    const std::string which = what + " output " + std::to_string(r);
    check_tensor(outputs[r], which);
    MT_CHECK(outputs[r].dtype() == input.dtype() && outputs[r].numel() == input.numel(), which, " is ",
             describe_tensor(outputs[r]), "; the input is ", describe_tensor(input));
  }
}

void ProcessGroup::check_flat(const Tensor& shard, const Tensor& whole, const std::string& what) const {
  check_tensor(shard, what + " shard");
  check_tensor(whole, what + " buffer");
  MT_CHECK(shard.dtype() == whole.dtype(), what, ": the shard is ", describe_tensor(shard), ", the buffer ",
           describe_tensor(whole), "; both must have one dtype");
  MT_CHECK(whole.numel() == shard.numel() * size_, what, ": the buffer holds ", whole.numel(), " elements, not ",
           size_, " shards of ", shard.numel(), " (pad it to a multiple of the world size, or all-reduce the rest)");
  // In place: a shard that overlaps the buffer must be exactly this rank's shard of it.
  const size_t bytes = shard.numel() * element_size(whole.dtype());
  const char* s = static_cast<const char*>(shard.raw_data());
  const char* w = static_cast<const char*>(whole.raw_data());
  const bool overlaps = bytes > 0 && s < w + bytes * size_ && w < s + bytes;
  MT_CHECK(!overlaps || s == w + static_cast<size_t>(rank_) * bytes, what, ": the shard overlaps the buffer but "
           "is not rank ", rank_, "'s shard of it; in place, pass narrow(buffer, 0, ", rank_ * shard.numel(), ", ",
           shard.numel(), ")");
}

}  // namespace mt::dist
