// Synchronised batch normalisation, as PyTorch's torch.nn.SyncBatchNorm: in training, each rank
// normalises its own slice with the mean and variance over every rank's slice, so N ranks with batch
// b compute what one BatchNorm computes on batch N·b: the same outputs, input gradients and running
// statistics (Note [Sync batch norm] in nn/batchnorm.cpp). Useful when the per-rank batch is too
// small for good statistics.
//
//   auto bn = std::make_shared<dist::SyncBatchNorm>(64, pg);   // inputs (N, 64, ...)
//   dist::convert_sync_batchnorm(*model, pg);                 // or: every BatchNorm of a model, in place
//
// The ranks' statistics are merged as counts, means and sums of squared deviations (Chan et al.'s
// parallel Welford combination), so inputs of large mean and small variance keep their digits. A
// training forward is a collective (one all-reduce), and so is its backward (one): every rank
// runs the same forwards and backwards. In eval mode it uses the running statistics and needs no
// collective, unless track_running_stats is false: then there are none, every forward uses batch
// statistics (BatchNorm::forward in nn/batchnorm.cpp), and an eval forward is a collective too, so
// every rank must run the same evaluation (PyTorch's SyncBatchNorm uses the rank's own batch then).
// A world of one is a plain BatchNorm. Parameters and buffers keep BatchNorm's names, so state dicts load
// into either.
//
// What it does not do: statistics over a subset of the ranks (PyTorch's process_group argument takes
// any group; here it is the group given, usually the whole world), returning a converted copy (PyTorch's
// convert_sync_batchnorm builds new modules; here the BatchNorms are switched in place, which also
// reaches those a parent holds as typed members).
#pragma once

#include <memory>

#include "distributed/process_group/process_group.h"
#include "nn/batchnorm.h"

namespace mt::dist {

// y = Σ over ranks of x, differentiable: the gradient of x is Σ over ranks of the gradient of y (an
// all-reduce in backward). A collective in forward and in backward.
Tensor allreduce_sum(const Tensor& x, std::shared_ptr<ProcessGroup> process_group);

// nn::BatchStatsReducer over a ProcessGroup: BatchNorm's per-channel sums via allreduce_sum.
class ProcessGroupStatsReducer final : public nn::BatchStatsReducer {
 public:
  explicit ProcessGroupStatsReducer(std::shared_ptr<ProcessGroup> process_group);
  Tensor sum(const Tensor& t) override;
  int world_size() const override { return process_group_->size(); }
  int rank() const override { return process_group_->rank(); }

 private:
  std::shared_ptr<ProcessGroup> process_group_;
};

// A BatchNorm for inputs (N, C, ...) of any rank ≥ 2, its statistics synchronised over process_group.
class SyncBatchNorm : public nn::BatchNorm {
 public:
  SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> process_group, nn::BatchNormOptions options = {});

 protected:
  void check_input(const Tensor& x) const override;
};

// Synchronises every BatchNorm in `module` (itself and its descendants) over process_group, in place;
// returns how many. Call it before wrapping the model in DDP; every rank converts the same model.
int convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> process_group);

// Whether `module` or a descendant is a BatchNorm whose statistics are synchronised (a SyncBatchNorm,
// or one convert_sync_batchnorm switched): its training forward and backward are collectives. Join
// asks, to refuse such a model (Note [Join] in ddp_join.h).
bool has_sync_batchnorm(const nn::Module& module);

}  // namespace mt::dist
