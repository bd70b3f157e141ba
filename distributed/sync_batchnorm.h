// SyncBatchNorm: batch normalisation whose batch statistics are those of the whole distributed
// batch, as PyTorch's torch.nn.SyncBatchNorm. Each rank normalises its own slice with the mean and
// variance over every rank's slice, so N ranks with batch b compute what one BatchNorm computes on
// batch N·b: the same outputs, input gradients and running statistics (Note [Sync batch norm] in
// sync_batchnorm.cpp). Useful when the per-rank batch is too small for good statistics.
//
//   auto bn = std::make_shared<dist::SyncBatchNorm>(64, pg);   // (N, 64, ...) inputs, any rank ≥ 2
//
// Forward in training mode is a collective (three all-reduces), and so is its backward (two): every
// rank runs the same forwards and backwards. Eval mode uses the running statistics, no collective.
// Parameters and buffers have BatchNorm's names, so state dicts load into either.
//
// What it does not do: convert_sync_batchnorm (replacing the BatchNorms inside an existing model:
// Module has no API to swap a child that a parent also holds as a typed member), a process group
// other than the whole world's for the statistics of a subset, and Welford-merged statistics (the
// variance is Σx²/n − mean², in the module's dtype; see the Note).
#pragma once

#include <memory>

#include "distributed/process_group.h"
#include "nn/batchnorm.h"

namespace mt::dist {

class SyncBatchNorm : public nn::BatchNorm {
 public:
  SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> process_group, nn::BatchNormOptions options = {});
  Tensor forward(const Tensor& x) override;  // x: (N, C, ...)

  const std::shared_ptr<ProcessGroup> process_group;

 protected:
  void check_input(const Tensor& x) const override;
};

// y = Σ over ranks of x, differentiable: the gradient of x is Σ over ranks of the gradient of y (an
// all-reduce in backward). A collective in forward and in backward.
Tensor allreduce_sum(const Tensor& x, std::shared_ptr<ProcessGroup> process_group);

}  // namespace mt::dist
