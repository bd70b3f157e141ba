// Batch normalisation, ReLU and (optionally) max pooling as one node: mt::batch_norm_relu (autograd/ops.h).
//
// Note [Fused batch norm, ReLU and pool]: a CNN's conv block is conv -> BatchNorm2d -> ReLU ->
// MaxPool2d. Composed, batch_norm_train's node makes six passes over the activations forward and seven
// backward, ReLU one each way and the pool one forward and a zero fill plus a scatter backward, each
// pass a full-size tensor written and read back; on mini_train's CNN preset these three layers took
// 43 % of the one-thread step (issue 42). Fused, the forward reads x three times (the mean, the
// variance, then normalise, ReLU and pool at once) and writes only the pooled output and its indices;
// the backward builds the masked gradient at the pool's winners, sums it per channel, and writes dx in
// one more pass. The node keeps x, the pooled output (ReLU's mask is output > 0: out = max of the
// window's ReLU outputs, so out > 0 exactly where the winner's is) and the indices, and recomputes
// x - mean rather than keeping a full-size normalised copy.
// The composition stays the reference: tests/nn/test_batch_norm_relu.cpp checks values, gradients
// (float64 gradcheck) and running statistics against relu(batch_norm(x)) and max_pool2d of it, in
// training and eval. Where the kernels do not apply (a backend without them, CUDA among them; 16-bit
// dtypes; a pool with padding, dilation or ceil_mode: raw::batch_norm_relu_applies), F::batch_norm_relu
// (nn/batchnorm.cpp) runs that composition instead.
//
// With x̂ = (x - mean)·inv, scale = weight·inv, y = relu(x̂·weight + bias), then the pool:
//   backward, dy = the pool's gradient at its winners where out > 0 (0 elsewhere):
//   db = Σ dy     dw = Σ dy·x̂     dx = scale·(dy - x̂·dw/n - db/n)   (batch statistics)
//                                  dx = scale·dy                      (fixed statistics, eval)
#include <algorithm>

#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_batch_norm.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

struct BatchNormReluBackward final : Node {
  SavedTensor x;            // (N, C, H, W)
  SavedTensor out;          // the op's output: (N, C, H, W), or (N, C, OH, OW) pooled
  SavedTensor indices;      // the pool's winners, like out; undefined without a pool
  SavedTensor mean, inv;    // (C): the statistics used, inv = 1/√(var + eps)
  SavedTensor scale;        // (C): weight·inv (inv without weight)
  std::optional<Pool2dOptions> pool;
  bool batch_stats = true;  // mean and var were this batch's: the gradient flows through them
  TensorList apply(TensorList&& grads) override {
    check_not_released();
    const Tensor idx = indices.defined() ? indices.unpack(*this) : Tensor();
    const raw::BatchNormReluGrads g =
        raw::batch_norm_relu_backward(grads[0], out.unpack(*this), idx, x.unpack(*this), mean.unpack(*this),
                                      inv.unpack(*this), scale.unpack(*this), pool, batch_stats);
    return {next_edges[0].valid() ? g.dx : Tensor(), next_edges[1].valid() ? g.dweight : Tensor(),
            next_edges[2].valid() ? g.dbias : Tensor()};
  }
  void release_saved() override {
    x.reset(), out.reset(), indices.reset(), mean.reset(), inv.reset(), scale.reset(), Node::release_saved();
  }
  std::string name() const override { return "BatchNormReluBackward"; }
};

}  // namespace

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const BatchNormReluOptions& o,
                       BatchNormStats* stats) {
  MT_CHECK(raw::batch_norm_relu_applies(x, o.pool), "batch_norm_relu: needs a float32 or float64 (N, C, H, W) input "
           "on a backend with the fused kernels and a pool without padding, dilation or ceil_mode (else compose "
           "batch_norm, relu and max_pool2d), got ", x.sizes(), " ", x.dtype(), " on ", x.device());
  const int64_t c = x.size(1), n = x.numel() / std::max<int64_t>(c, 1);
  for (const Tensor* p : {&weight, &bias, &o.running_mean, &o.running_var})
    MT_CHECK(!p->defined() || (p->dim() == 1 && p->size(0) == c && p->dtype() == x.dtype()),
             "batch_norm_relu: weight, bias and the running statistics must be (", c, ") of ", x.dtype(), ", got ",
             p->sizes(), " ", p->dtype(), " for input ", x.sizes());
  MT_CHECK(o.running_mean.defined() == o.running_var.defined(),
           "batch_norm_relu: give both running_mean and running_var, or neither");
  const bool batch_stats = !o.running_mean.defined();
  MT_CHECK(!batch_stats || n > 1, "batch_norm_relu: expected more than 1 value per channel when training, got input "
           "of shape ", x.sizes());
  Tensor mean, var;
  if (batch_stats) {
    raw::BatchNormMoments m = raw::batch_norm_stats(x);
    mean = m.mean, var = m.var;
  } else {
    // Copies: a later training forward updates the buffers in place, and this graph's backward must not mind.
    mean = raw::clone(o.running_mean), var = raw::clone(o.running_var);
  }
  const Tensor inv = raw::unary(UnaryOp::Pow, raw::unary(UnaryOp::AddScalar, var, o.eps), -0.5);
  const Tensor scale = weight.defined() ? raw::binary(BinaryOp::Mul, raw::contiguous(weight), inv) : inv;
  const Tensor shift = bias.defined() ? raw::contiguous(bias) : zeros({c}, {.dtype = x.dtype(), .device = x.device()});
  raw::BatchNormReluResult r = raw::batch_norm_relu(x, mean, scale, shift, o.pool);
  if (stats) *stats = {mean, var};
  if (auto node = record<BatchNormReluBackward>({&x, &weight, &bias})) {
    node->x = SavedTensor::input(x), node->out = SavedTensor(r.out);
    if (r.indices.defined()) node->indices = SavedTensor(r.indices);
    node->mean = SavedTensor(mean), node->inv = SavedTensor(inv), node->scale = SavedTensor(scale);
    node->pool = o.pool, node->batch_stats = batch_stats;
    set_history(r.out, node);
  }
  return r.out;
}

}  // namespace mt
