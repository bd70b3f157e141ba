// SyncBatchNorm (see sync_batchnorm.h): the differentiable all-reduce that BatchNorm's synchronised
// forward (Note [Sync batch norm] in nn/batchnorm.cpp) sums its statistics with, and the helpers that
// give a BatchNorm one.
#include "distributed/ddp/sync_batchnorm.h"

#include "autograd/record.h"

namespace mt::dist {

namespace {

// y = Σ_r x_r  =>  dx_r = ∂(Σ_r' L_r')/∂x_r = Σ_r' dy_r': every rank's y is the same sum, so the
// gradient reaching x on one rank is the sum of the gradients of y on all ranks. An undefined dy
// (nothing used y here) still takes part, as zeros, so every rank issues the same collectives.
struct AllreduceSumBackward final : Node {
  std::shared_ptr<ProcessGroup> pg;
  Shape shape;
  DType dtype = kFloat32;
  Device device;
  TensorList apply(TensorList&& g) override {
    Tensor dx = g[0].defined() ? g[0].contiguous().clone() : zeros(shape, {.dtype = dtype, .device = device});
    pg->allreduce(dx, ReduceOp::Sum)->wait();
    return {dx};
  }
  std::string name() const override { return "AllreduceSumBackward"; }
};

// A BatchNorm's reducer, kept by each synchronised BatchNorm.
void synchronise(nn::BatchNorm& bn, const std::shared_ptr<ProcessGroup>& process_group) {
  bn.stats_reducer = std::make_shared<ProcessGroupStatsReducer>(process_group);
}

}  // namespace

Tensor allreduce_sum(const Tensor& x, std::shared_ptr<ProcessGroup> process_group) {
  Tensor y = x.detach().contiguous().clone();
  process_group->allreduce(y, ReduceOp::Sum)->wait();
  if (auto node = detail::record<AllreduceSumBackward>({&x})) {
    node->pg = std::move(process_group);
    node->shape = x.sizes(), node->dtype = x.dtype(), node->device = x.device();
    detail::set_history(y, node);
  }
  return y;
}

ProcessGroupStatsReducer::ProcessGroupStatsReducer(std::shared_ptr<ProcessGroup> process_group)
    : process_group_(std::move(process_group)) {
  MT_CHECK(process_group_ != nullptr, "SyncBatchNorm: the process group is null");
}

Tensor ProcessGroupStatsReducer::sum(const Tensor& t) {
  MT_CHECK(t.device() == process_group_->device(), "SyncBatchNorm: the input is on ", t.device(),
           " but the process group communicates on ", process_group_->device(), "; move the model there");
  return allreduce_sum(t, process_group_);
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> process_group,
                             nn::BatchNormOptions options)
    : BatchNorm(num_features, options) {
  synchronise(*this, process_group);
}

void SyncBatchNorm::check_input(const Tensor& x) const {
  MT_CHECK(x.dim() >= 2 && x.size(1) == num_features, name(), "(", extra_repr(), "): expected input of shape (N, ",
           num_features, ", ...), got ", x.sizes());
}

int convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> process_group) {
  MT_CHECK(process_group != nullptr, "convert_sync_batchnorm: the process group is null");
  int converted = 0;
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&module)) {
    synchronise(*bn, process_group);
    ++converted;
  }
  for (const auto& [name, child] : module.named_children()) converted += convert_sync_batchnorm(*child, process_group);
  return converted;
}

bool has_sync_batchnorm(const nn::Module& module) {
  const auto* bn = dynamic_cast<const nn::BatchNorm*>(&module);
  if (bn != nullptr && bn->stats_reducer != nullptr) return true;
  for (const auto& [name, child] : module.named_children())
    if (has_sync_batchnorm(*child)) return true;
  return false;
}

}  // namespace mt::dist
