// Batch normalisation: the functional form (F::batch_norm; training is mt::batch_norm_train's one
// node, eval is composed from differentiable ops; F::batch_norm_relu, the fused form with the ReLU
// and pool after it), the BatchNorm1d/2d modules that own the parameters, buffers and modes, and the
// synchronised training forward (Note [Sync batch norm]).
#include "nn/batchnorm.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/init.h"
#include "tensor/raw_batch_norm.h"

namespace mt::nn {

namespace functional {

namespace {

// running ← (1 - f)·running + f·batch, the variance unbiased (·n/(n - 1)); nothing without running statistics.
void update_running_stats(const Tensor& running_mean, const Tensor& running_var, const BatchNormStats& stats,
                          int64_t n, double momentum) {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  const double unbias = static_cast<double>(n) / static_cast<double>(n - 1);
  Tensor rm = running_mean, rv = running_var;  // handles sharing the buffers' storage
  rm.mul_(1.0 - momentum).add_(stats.mean, momentum);
  rv.mul_(1.0 - momentum).add_(stats.var * unbias, momentum);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormFuncOptions o) {
  MT_CHECK(x.dim() >= 2, "batch_norm: input must be (N, C, ...), got shape ", x.sizes());
  const int64_t c = x.size(1);
  Shape channel_shape;  // (1, C, 1, ...): a per-channel tensor broadcast against x
  for (int d = 0; d < x.dim(); ++d) channel_shape.push_back(d == 1 ? c : 1);
  const auto per_channel = [&](const Tensor& t) { return t.view(channel_shape); };
  if (o.training) {
    BatchNormStats stats;
    const Tensor y = batch_norm_train(x, weight, bias, o.eps, &stats);  // weight and bias applied
    update_running_stats(running_mean, running_var, stats, x.numel() / c, o.momentum);
    return y;
  }
  MT_CHECK(running_mean.defined() && running_var.defined(), "batch_norm: eval mode needs running_mean and running_var");
  // The statistics are constants: y = x·scale + shift with per-channel scale = w/√(running_var + eps)
  // and shift = b - running_mean·scale, two passes over x. For 16-bit x, scale and shift are float32
  // (so x·scale + shift is too) and y is rounded once (Note [Low-precision batch norm]).
  const auto wide = [](const Tensor& t) { return t.defined() && is_low_precision(t.dtype()) ? t.to(kFloat32) : t; };
  Tensor scale = (wide(running_var) + o.eps).pow(-0.5);
  if (weight.defined()) scale = scale * wide(weight);
  Tensor shift = -(wide(running_mean) * scale);
  if (bias.defined()) shift = shift + wide(bias);
  const Tensor y = x * per_channel(scale) + per_channel(shift);
  return y.to(x.dtype());
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, BatchNormFuncOptions o, const std::optional<Pool2dOptions>& pool) {
  bool fusable = raw::batch_norm_relu_applies(x, pool);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    fusable = fusable && (!t->defined() || t->dtype() == x.dtype());  // the kernels take one dtype
  if (!fusable) {  // the composition the fused op replaces
    const Tensor y = mt::relu(batch_norm(x, running_mean, running_var, weight, bias, o));
    return pool ? mt::max_pool2d(y, *pool) : y;
  }
  if (!o.training) {
    MT_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: eval mode needs running_mean and running_var");
    return mt::batch_norm_relu(x, weight, bias, {.eps = o.eps, .running_mean = running_mean,
                                                 .running_var = running_var, .pool = pool});
  }
  BatchNormStats stats;
  const Tensor y = mt::batch_norm_relu(x, weight, bias, {.eps = o.eps, .pool = pool}, &stats);
  update_running_stats(running_mean, running_var, stats, x.numel() / x.size(1), o.momentum);
  return y;
}

}  // namespace functional

BatchNorm::BatchNorm(int64_t num_features, BatchNormOptions options)
    : num_features(num_features), options(options) {
  MT_CHECK(num_features > 0, "BatchNorm: num_features must be positive, got ", num_features);
  MT_CHECK(!options.momentum || (*options.momentum >= 0.0 && *options.momentum <= 1.0),
           "BatchNorm: momentum must be in [0, 1], got ", *options.momentum);
  if (options.affine) {
    weight = register_parameter("weight", empty({num_features}));
    bias = register_parameter("bias", empty({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", empty({num_features}));
    running_var = register_buffer("running_var", empty({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", empty(Shape{}, {.dtype = kInt64}));
  }
  reset_parameters();
}

void BatchNorm::reset_running_stats() {
  if (!options.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (options.affine) init::ones_(weight), init::zeros_(bias);
}

bool BatchNorm::synced_here() const {
  // PyTorch's rule: batch statistics while training, or always when nothing is tracked.
  const bool batch_stats = is_training() || !options.track_running_stats;
  return batch_stats && stats_reducer && stats_reducer->world_size() > 1;
}

double BatchNorm::count_batch() {
  if (!is_training() || !options.track_running_stats) return 0.0;
  NoGradGuard no_grad;
  num_batches_tracked.add_(1.0);
  return options.momentum ? *options.momentum : 1.0 / num_batches_tracked.item();
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  if (synced_here()) return forward_synced(x);  // counts all ranks
  const bool batch_stats = is_training() || !options.track_running_stats;
  MT_CHECK(!batch_stats || x.numel() / num_features > 1, name(), "(", extra_repr(), "): expected more than 1 "
           "value per channel when training, got input of shape ", x.sizes());
  const double factor = count_batch();
  return functional::batch_norm(x, running_mean, running_var, weight, bias,
                       {.training = batch_stats, .momentum = factor, .eps = options.eps});
}

Tensor BatchNorm::forward_relu(const Tensor& x, const std::optional<Pool2dOptions>& pool) {
  check_input(x);
  if (synced_here()) {  // the statistics need the other ranks: not fused (Note [Sync batch norm])
    const Tensor y = mt::relu(forward_synced(x));
    return pool ? mt::max_pool2d(y, *pool) : y;
  }
  const bool batch_stats = is_training() || !options.track_running_stats;
  MT_CHECK(!batch_stats || x.numel() / num_features > 1, name(), "(", extra_repr(), "): expected more than 1 "
           "value per channel when training, got input of shape ", x.sizes());
  const double factor = count_batch();
  return functional::batch_norm_relu(x, running_mean, running_var, weight, bias,
                                     {.training = batch_stats, .momentum = factor, .eps = options.eps}, pool);
}

// Note [Sync batch norm]: per channel c, every rank r has its own Welford statistics over its batch,
//   n_r = count,  mean_r = Σ x / n_r,  M2_r = Σ (x − mean_r)²                  (two passes over x)
// and the ranks' statistics are merged as Chan, Golub & LeVeque's parallel combination does:
//   n = Σ_r n_r,   mean = Σ_r n_r·mean_r / n,   M2 = Σ_r M2_r + Σ_r n_r·(mean_r − mean)²
//   var = M2/n (biased),   y = (x − mean)/√(var + eps)·weight + bias
// (PyTorch all-gathers (count, mean, invstd) and merges them the same way). Not Σx²/n − mean²: when
// |mean| ≫ std, Σx² and n·mean² agree in their leading digits and the difference is float32 noise,
// even negative; every term above is of the size of the spread, so little is lost.
//   forward   one collective: each rank writes (n_r, mean_r, M2_r) into slot r of a zero
//             (world, 3, C) tensor and the reducer's differentiable sum all-reduces it, which is
//             an all-gather; the merge is then the same ops on every rank.
//   backward  the chain rule through the merge and the local statistics; the sum's backward
//             all-reduces the gradient of the (world, 3, C) tensor (one collective), so rank r's
//             slot gets ∂(Σ_ranks L)/∂(n_r, mean_r, M2_r).
// So the gradient each rank gets for its x is that of Σ_ranks L_rank (PyTorch's convention; DDP then
// averages the parameter gradients over the ranks). The running statistics take the whole batch's
// mean and var·n/(n−1), the same on every rank. Every rank must run the same forwards and backwards:
// collectives pair up by issue order (Note [Collective order] in distributed/process_group/work.h), and the
// backward one runs inside the engine at the same point of the same graph on every rank, between
// DDP's bucket all-reduces.
Tensor BatchNorm::forward_synced(const Tensor& x) {
  std::vector<int64_t> dims{0};
  Shape channel_shape{1, num_features};  // (1, C, 1, ...)
  for (int d = 2; d < x.dim(); ++d) dims.push_back(d), channel_shape.push_back(1);
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  // This rank's statistics, (C) each; a rank without values contributes n_r = 0, mean_r = M2_r = 0.
  const double local_n = static_cast<double>(x.numel() / num_features);
  const Tensor local_mean = sum(x, dims) / std::max(local_n, 1.0);
  const Tensor local_m2 = sum(pow(x - local_mean.view(channel_shape), 2.0), dims);
  const Tensor local = stack({full({num_features}, local_n, like), local_mean, local_m2});  // (3, C)
  // Every rank's: (world, 3, C), row r from rank r.
  const int world = stats_reducer->world_size(), rank = stats_reducer->rank();
  std::vector<Tensor> rows;
  if (rank > 0) rows.push_back(zeros({rank, 3, num_features}, like));
  rows.push_back(unsqueeze(local, 0));
  if (rank + 1 < world) rows.push_back(zeros({world - rank - 1, 3, num_features}, like));
  const Tensor all = stats_reducer->sum(cat(rows, 0));
  const Tensor counts = squeeze(narrow(all, 1, 0, 1), 1);  // (world, C)
  const Tensor means = squeeze(narrow(all, 1, 1, 1), 1);   // (world, C)
  const Tensor m2s = squeeze(narrow(all, 1, 2, 1), 1);     // (world, C)
  const double n = sum(narrow(counts.detach(), 1, 0, 1)).item();
  MT_CHECK(n > 1, name(), "(", extra_repr(), "): expected more than 1 value per channel over all ranks when "
           "training, got ", n, " (this rank's input: ", x.sizes(), ")");
  const Tensor mean = sum(counts * means, {0}) / n;                                            // (C)
  const Tensor m2 = sum(m2s, {0}) + sum(counts * pow(means - unsqueeze(mean, 0), 2.0), {0});  // (C)
  const Tensor var = m2 / n;                                                                   // (C), biased
  Tensor y = (x - mean.view(channel_shape)) * pow(var + options.eps, -0.5).view(channel_shape);
  if (options.affine) y = y * weight.view(channel_shape) + bias.view(channel_shape);
  if (is_training() && options.track_running_stats) {
    NoGradGuard no_grad;
    const double f = count_batch();
    Tensor rm = running_mean, rv = running_var;  // handles sharing the buffers' storage
    rm.mul_(1.0 - f).add_(mean.detach(), f);
    rv.mul_(1.0 - f).add_(var.detach() * (n / (n - 1)), f);
  }
  return y;
}

std::string BatchNorm::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << options.eps << ", momentum=";
  if (options.momentum) os << *options.momentum;
  else os << "None";
  os << ", affine=" << (options.affine ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats ? "true" : "false");
  return os.str();
}

void BatchNorm1d::check_input(const Tensor& x) const {
  MT_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(1) == num_features, name(), "(", extra_repr(),
           "): expected input of shape (N, ", num_features, ") or (N, ", num_features, ", L), got ", x.sizes());
}

void BatchNorm2d::check_input(const Tensor& x) const {
  MT_CHECK(x.dim() == 4 && x.size(1) == num_features, name(), "(", extra_repr(), "): expected input of shape (N, ",
           num_features, ", H, W), got ", x.sizes());
}

}  // namespace mt::nn
