// cross_entropy's common case (no class weights, no ignored targets, no label smoothing) as one
// autograd node that reads the logits a block of rows at a time (Note [Cross-entropy in row blocks]).
// nn/loss.cpp decides when it applies and reduces its per-sample losses; the weighted, ignoring and
// smoothed cases stay compositions there, and tests compare the two.
#include <algorithm>

#include "autograd/record.h"
#include "nn/functional.h"
#include "tensor/raw_ops.h"

namespace mt::nn::detail {

namespace {

// Note [Cross-entropy in row blocks]: the loss of sample i is ℓᵢ = log Σ_c e^{x_ic} − x_i,tᵢ, and
// its gradient dxᵢ = gᵢ·(softmax(xᵢ) − onehot(tᵢ)). The composition gather(log_softmax(x), t) keeps
// log_softmax's (N, C) output for its backward, which then makes four more (N, C) tensors: gather's
// scattered gradient, softmax(y), p·Σdy and dx; under autocast a float32 (N, C) copy of the 16-bit
// logits comes first. For a language model, whose C is the vocabulary, these are the largest tensors
// of the step, and they are alive at its peak: the loss runs last in the forward and first in the
// backward, while every activation is still saved. This node keeps only the logits, in their own
// dtype, and the targets; its forward and backward walk the logits in blocks of rows, each widened
// to the compute dtype (float32 for bfloat16 and float16: Note [Low-precision compute type]),
// turned into ℓ or into g·(softmax − onehot) there, and written into the (N) losses or straight into
// dx in the logits' dtype, rounded once. The only (N, C) tensor it makes is dx, and its other
// temporaries are one block each (kBlockElements, at least a row). This is also autocast's float32
// policy for losses (Note [Autocast op lists]): the arithmetic is float32's, without a float32 copy.
// The blocks are raw ops every backend has, so the node needs no kernel of its own on any device;
// nn/loss.cpp takes it only when it knows no target is ignore_index, which it checks for targets on
// the CPU (on a GPU that would wait for the device, and the composition runs).
constexpr int64_t kBlockElements = int64_t{1} << 16;  // 256 KiB of float32

// Rows per block for C classes, and the dtype a block is computed in.
int64_t block_rows(int64_t c) { return std::max<int64_t>(1, kBlockElements / std::max<int64_t>(c, 1)); }
DType compute_dtype(DType dtype) { return is_low_precision(dtype) ? kFloat32 : dtype; }

struct CrossEntropyRowsBackward final : Node {
  SavedTensor logits;  // (N, C), the input's dtype
  Tensor target;       // (N) int64: no gradient, not an output of the graph
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor x = logits.unpack(*this);
    const int64_t n = x.size(0), rows = block_rows(x.size(1));
    const DType compute = compute_dtype(x.dtype());
    const Tensor dx = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
    for (int64_t r = 0; r < n; r += rows) {
      const int64_t len = std::min(rows, n - r);
      const Tensor t = raw::unsqueeze(raw::narrow(target, 0, r, len), 1);                      // (len, 1)
      const Tensor gb = raw::cast(raw::unsqueeze(raw::narrow(g[0], 0, r, len), 1), compute);  // (len, 1)
      const Tensor d = raw::softmax(raw::cast(raw::narrow(x, 0, r, len), compute), 1);        // (len, C)
      raw::binary_(BinaryOp::Mul, d, gb);                                            // g·softmax
      raw::binary_(BinaryOp::Sub, d, raw::scatter_add_zeros(d.sizes(), 1, t, gb));  // − g·onehot
      raw::copy_(raw::narrow(dx, 0, r, len), d);                                     // rounded once
    }
    return {dx};
  }
  void release_saved() override { logits.reset(), target = Tensor(), Node::release_saved(); }
  std::string name() const override { return "CrossEntropyRowsBackward"; }
};

}  // namespace

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target) {
  const int64_t n = logits.size(0), rows = block_rows(logits.size(1));
  const DType compute = compute_dtype(logits.dtype());
  Tensor losses = empty({n, 1}, {.dtype = compute, .device = logits.device()});
  for (int64_t r = 0; r < n; r += rows) {
    const int64_t len = std::min(rows, n - r);
    const Tensor lp = raw::log_softmax(raw::cast(raw::narrow(logits, 0, r, len), compute), 1);  // (len, C)
    const Tensor picked = raw::gather(lp, 1, raw::unsqueeze(raw::narrow(target, 0, r, len), 1));  // (len, 1)
    raw::unary_into(UnaryOp::Neg, raw::narrow(losses, 0, r, len), picked, 0.0);
  }
  losses = raw::view(losses, {n});
  if (auto node = mt::detail::record<CrossEntropyRowsBackward>({&logits})) {
    node->logits = SavedTensor::input(logits), node->target = target;
    mt::detail::set_history(losses, node);
  }
  return losses;
}

}  // namespace mt::nn::detail
