// SyncBatchNorm (see sync_batchnorm.h): batch statistics summed over the ranks with a differentiable
// all-reduce, so that the backward's matching all-reduces come from the chain rule.
#include "distributed/sync_batchnorm.h"

#include <sstream>

#include "autograd/ops.h"
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

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> process_group,
                             nn::BatchNormOptions options)
    : BatchNorm(num_features, options), process_group(std::move(process_group)) {
  MT_CHECK(this->process_group != nullptr, "SyncBatchNorm: the process group is null");
}

void SyncBatchNorm::check_input(const Tensor& x) const {
  MT_CHECK(x.dim() >= 2 && x.size(1) == num_features, name(), "(", extra_repr(), "): expected input of shape (N, ",
           num_features, ", ...), got ", x.sizes());
}

// Note [Sync batch norm]: per channel c, over the N·(spatial) values of every rank,
//   forward   s = Σ_ranks Σ x,  q = Σ_ranks Σ x²,  n = Σ_ranks count      (three all-reduces)
//             mean = s/n,  var = q/n − mean²  (biased),  y = (x − mean)/√(var + eps)·weight + bias
//   backward  the chain rule through those sums: ∂L/∂(local Σ x) and ∂L/∂(local Σ x²) are the SUMS
//             over the ranks of ∂L/∂s and ∂L/∂q (AllreduceSumBackward: two all-reduces), i.e.
//             PyTorch's all-reduce of Σ dy and Σ dy·(x − mean), written in the other basis.
// So the gradient each rank gets for its x is that of Σ_ranks L_rank (PyTorch's convention; DDP then
// averages the parameter gradients over the ranks). The running statistics take mean and var·n/(n−1)
// of the whole batch, identical on every rank. Every rank must run the same forwards and backwards:
// the collectives pair up by issue order (Note [Collective order] in work.h); the backward ones run
// inside the engine at the same point of the same graph on every rank, between DDP's bucket
// all-reduces. Σx²/n − mean² loses precision when |mean| ≫ std (in float32); PyTorch gathers
// per-rank Welford statistics instead.
Tensor SyncBatchNorm::forward(const Tensor& x) {
  check_input(x);
  const bool batch_stats = is_training() || !options.track_running_stats;
  if (!batch_stats || process_group->size() == 1) return BatchNorm::forward(x);
  std::vector<int64_t> dims{0};
  Shape channel_shape{1, num_features};
  for (int d = 2; d < x.dim(); ++d) dims.push_back(d), channel_shape.push_back(1);
  const Tensor count = full({1}, static_cast<double>(x.numel() / num_features), {.dtype = kFloat64});
  const double n = allreduce_sum(count.to(process_group->device()), process_group).to(kCPU).item();
  MT_CHECK(n > 1, name(), "(", extra_repr(), "): expected more than 1 value per channel over all ranks when "
           "training, got ", n, " (this rank's input: ", x.sizes(), ")");
  const Tensor mean = allreduce_sum(sum(x, dims), process_group) / n;      // (C)
  const Tensor mean_sq = allreduce_sum(sum(x * x, dims), process_group) / n;  // (C)
  const Tensor var = mean_sq - mean * mean;                                  // (C), biased
  Tensor y = (x - mean.view(channel_shape)) * pow(var + options.eps, -0.5).view(channel_shape);
  if (options.affine) y = y * weight.view(channel_shape) + bias.view(channel_shape);
  if (is_training() && options.track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
    const double f = options.momentum ? *options.momentum : 1.0 / num_batches_tracked.item();
    Tensor rm = running_mean, rv = running_var;  // handles sharing the buffers' storage
    rm.mul_(1.0 - f).add_(mean.detach(), f);
    rv.mul_(1.0 - f).add_(var.detach() * (n / (n - 1)), f);
  }
  return y;
}

}  // namespace mt::dist
