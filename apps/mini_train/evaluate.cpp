// Accuracy or mean squared error of a model on a dataset (see evaluate.h).
#include "apps/mini_train/evaluate.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "tensor/raw_ops.h"

namespace mt::app {

Score evaluate(nn::Module& model, const data::TensorDataset& set, bool classification, const Device& device,
               ProgressBar* bar) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  const int64_t n = set.size();
  for (int64_t start = 0; start < n; start += 4096) {
    const int64_t len = std::min<int64_t>(4096, n - start);
    const Tensor x = raw::narrow(set.inputs(), 0, start, len), y = raw::narrow(set.targets(), 0, start, len);
    const Tensor out = model.forward(x.to(device)).to(kCPU);  // to() of a tensor already there is itself
    if (classification) {
      total += raw::sum(raw::binary(BinaryOp::Eq, raw::argmax(out, 1), y)).item();
    } else {
      const Tensor diff = raw::binary(BinaryOp::Sub, out, y);
      total += raw::sum(raw::binary(BinaryOp::Mul, diff, diff)).item() / static_cast<double>(out.size(1));
    }
    if (bar) bar->update(start + len, start + len);
  }
  model.train();
  return {.value = total / static_cast<double>(n), .classification = classification};
}

}  // namespace mt::app
