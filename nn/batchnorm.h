// Batch normalisation (Ioffe & Szegedy 2015) as PyTorch's BatchNorm1d / BatchNorm2d. Per channel c
// (dim 1 of the input), over every other dim:
//   training:  y = (x - mean_B) / √(var_B + eps) · weight + bias     batch statistics, var_B biased (/n)
//              running_mean ← (1 - f)·running_mean + f·mean_B
//              running_var  ← (1 - f)·running_var  + f·var_B·n/(n - 1)   (the unbiased variance)
//              num_batches_tracked += 1;  f = momentum, or 1/num_batches_tracked when momentum is
//              nullopt (a cumulative average of every batch so far)
//   eval:      y = (x - running_mean) / √(running_var + eps) · weight + bias
// With track_running_stats = false there are no running buffers and both modes use batch statistics.
// running_mean (zeros), running_var (ones) and num_batches_tracked (int64, 0-dim) are buffers: in the
// state dict under PyTorch's names, moved by to(), not trained.
//
// Shapes: BatchNorm1d takes (N, C) or (N, C, L); BatchNorm2d takes (N, C, H, W). Training needs more
// than one value per channel (N·L or N·H·W > 1), or the variance is undefined: that is an error.
// With a stats_reducer set (distributed/ddp/sync_batchnorm.h: SyncBatchNorm, convert_sync_batchnorm),
// batch statistics (in training, and in eval too without track_running_stats) are those of every
// rank's batch together (Note [Sync batch norm]).
// What it does not do: BatchNorm3d, and running statistics in a dtype other than the module's.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "nn/module.h"
#include "tensor/window.h"

namespace mt::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative moving average
  bool affine = true;                    // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;
};

// Sums per-channel statistics over the ranks of a data-parallel job, for a synchronised BatchNorm.
// nn/ knows only this interface; distributed/ddp/sync_batchnorm.h implements it over a ProcessGroup.
class BatchStatsReducer {
 public:
  virtual ~BatchStatsReducer() = default;
  // Σ over the ranks of t, differentiable: its backward sums t's gradients over the ranks. A collective.
  virtual Tensor sum(const Tensor& t) = 0;
  virtual int world_size() const = 0;
  virtual int rank() const = 0;  // this rank's index in [0, world_size())
};

class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // forward(x), then ReLU, then max_pool2d(*pool) when pool is set, as one fused op where the backend has
  // it (Note [Fused batch norm, ReLU and pool], autograd/functions/batch_norm_relu.cpp): the values,
  // gradients and running-statistics updates of the layers called one after another. Sequential calls
  // it for the runs BatchNorm2d, ReLU (, MaxPool2d) it holds (Note [Fused runs in Sequential]).
  // Statistics synchronised over several ranks (stats_reducer) are not fused: forward, relu, pool.
  Tensor forward_relu(const Tensor& x, const std::optional<Pool2dOptions>& pool = std::nullopt);
  std::string extra_repr() const override;
  void reset_running_stats();  // running_mean = 0, running_var = 1, num_batches_tracked = 0
  void reset_parameters();     // the running statistics, and weight = 1, bias = 0

  const int64_t num_features;
  const BatchNormOptions options;
  Tensor weight, bias;                                    // (C); undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), () int64; undefined without tracking
  std::shared_ptr<BatchStatsReducer> stats_reducer;       // set: batch statistics over every rank

 protected:
  BatchNorm(int64_t num_features, BatchNormOptions options);
  // Throws naming the layer, the expected and the actual shape, when x is not an input for it.
  virtual void check_input(const Tensor& x) const = 0;

 private:
  Tensor forward_synced(const Tensor& x);  // training with stats_reducer (Note [Sync batch norm])
  bool synced_here() const;               // forward would take forward_synced
  // The momentum factor of this forward's running-statistics update, after counting the batch in
  // num_batches_tracked (training with tracking); 0 otherwise.
  double count_batch();
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {}) : BatchNorm(num_features, options) {}

 protected:
  void check_input(const Tensor& x) const override;
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {}) : BatchNorm(num_features, options) {}

 protected:
  void check_input(const Tensor& x) const override;
};

}  // namespace mt::nn

namespace mt::nn::functional {

struct BatchNormFuncOptions {
  bool training = false;  // true: batch statistics (and running-stat updates when given)
  double momentum = 0.1;  // the update factor f above
  double eps = 1e-5;
};
// x: (N, C, ...)  running_mean, running_var, weight, bias: (C) or undefined. In training the running
// statistics, when defined, are updated in place; in eval they must be defined and are used.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormFuncOptions options = {});
// relu(batch_norm(x, ...)), then max_pool2d(*pool) when pool is set, as one op (mt::batch_norm_relu),
// with the same running-statistics update. x: (N, C, H, W).
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, BatchNormFuncOptions options = {},
                       const std::optional<Pool2dOptions>& pool = std::nullopt);

}  // namespace mt::nn::functional
