// The activations, losses and tensor ops of issue 40 on CUDA against the CPU: values and input
// gradients, float64 and float32, on a transposed (non-contiguous) input. They are compositions of ops
// with CUDA kernels, so this checks that the compositions use only those and pick the same branches
// on both devices. Needs a GPU (tests/cuda/main.cpp skips otherwise; the emulator runs it anywhere).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "minitrain.h"
#include "nn/nn.h"
#include "tensor/raw_ops.h"
#include "cuda_compare.h"

using namespace mt;

namespace {

using test::gpu;
using test::kGpu;
using test::sample;

using test::check_close;
double tol_for(DType t) { return t == kFloat32 ? 1e-5 : 1e-12; }

// f(x.t()) and d sum(f(x.t())·gy)/dx on the CPU and on cuda:0, compared. x: (rows, cols), scaled by `scale`.
void compare(const std::string& what, const std::function<Tensor(const Tensor&)>& f, Shape shape, double scale = 1.0) {
  for (DType dt : {kFloat64, kFloat32}) {
    const std::string name = what + " " + dtype_name(dt);
    const Tensor x = raw::unary(UnaryOp::MulScalar, sample(shape, dt, 1), scale);
    const Tensor xc = x.clone().requires_grad_(), xg = gpu(x).requires_grad_();
    const Tensor yc = f(xc.t()), yg = f(xg.t());
    check_close(yc, yg, tol_for(dt), name + ": value");
    const Tensor gy = sample(yc.sizes(), dt, 2);
    (yc * gy).sum().backward();
    (yg * gpu(gy)).sum().backward();
    check_close(xc.grad(), xg.grad(), tol_for(dt), name + ": gradient");
  }
}

}  // namespace

TEST_CASE("activations on CUDA match the CPU, values and gradients") {
  compare("silu", [](const Tensor& x) { return nn::F::silu(x); }, {6, 33}, 3.0);
  compare("leaky_relu", [](const Tensor& x) { return nn::F::leaky_relu(x, 0.2); }, {6, 33}, 3.0);
  compare("elu", [](const Tensor& x) { return nn::F::elu(x, 1.5); }, {6, 33}, 3.0);
  compare("softplus", [](const Tensor& x) { return nn::F::softplus(x, 2.0, 5.0); }, {6, 33}, 5.0);
  compare("mish", [](const Tensor& x) { return nn::F::mish(x); }, {6, 33}, 15.0);
  compare("hardswish", [](const Tensor& x) { return nn::F::hardswish(x); }, {6, 33}, 3.0);
}

TEST_CASE("losses on CUDA match the CPU, values and gradients") {
  // x.t() is (5, 4): five samples, four classes; sample 2 ignored, class weights, label smoothing
  const Tensor t = from_vector(std::vector<int64_t>{3, 0, -100, 1, 2}, {5});
  for (nn::Reduction r : {nn::kMean, nn::kNone}) {
    compare(std::string("cross_entropy ") + nn::reduction_name(r), [&](const Tensor& x) {
      const Tensor w = raw::cast(from_vector(std::vector<double>{0.5, 2.0, 1.0, 0.25}, {4}), x.dtype());
      const bool cuda = !x.device().is_cpu();
      return nn::F::cross_entropy(x, cuda ? gpu(t) : t, {.reduction = r, .weight = cuda ? gpu(w) : w,
                                                          .label_smoothing = 0.1});
    }, {4, 5}, 2.0);
  }
  compare("binary_cross_entropy_with_logits", [](const Tensor& x) {
    const Tensor target = raw::unary(UnaryOp::Sigmoid, sample(x.sizes(), x.dtype(), 3));
    const Tensor pos = raw::unary(UnaryOp::Exp, sample({x.size(1)}, x.dtype(), 4));
    const bool cuda = !x.device().is_cpu();
    return nn::F::binary_cross_entropy_with_logits(x, cuda ? gpu(target) : target,
                                                   {.reduction = nn::kSum, .pos_weight = cuda ? gpu(pos) : pos});
  }, {7, 5}, 6.0);
  compare("kl_div batchmean", [](const Tensor& x) {
    const Tensor target = raw::softmax(sample(x.sizes(), x.dtype(), 5), 1);
    return nn::F::kl_div(x.log_softmax(1), x.device().is_cpu() ? target : gpu(target), {.reduction = nn::kBatchMean});
  }, {6, 4});
  compare("nll_loss with weights and ignore_index", [&](const Tensor& x) {
    const Tensor w = raw::cast(from_vector(std::vector<double>{0.5, 2.0, 1.0, 0.25}, {4}), x.dtype());
    const bool cuda = !x.device().is_cpu();
    return nn::F::nll_loss(x.log_softmax(1), cuda ? gpu(t) : t, {.weight = cuda ? gpu(w) : w});
  }, {4, 5}, 2.0);
  compare("binary_cross_entropy", [](const Tensor& x) {
    const Tensor target = raw::unary(UnaryOp::Sigmoid, sample(x.sizes(), x.dtype(), 7));
    return nn::F::binary_cross_entropy(x.sigmoid(), x.device().is_cpu() ? target : gpu(target));
  }, {7, 5}, 3.0);
  compare("smooth_l1_loss", [](const Tensor& x) {
    const Tensor target = sample(x.sizes(), x.dtype(), 8);
    return nn::F::smooth_l1_loss(x, x.device().is_cpu() ? target : gpu(target), {.beta = 0.5});
  }, {6, 4}, 2.0);
  compare("huber_loss", [](const Tensor& x) {
    const Tensor target = sample(x.sizes(), x.dtype(), 6);
    return nn::F::huber_loss(x, x.device().is_cpu() ? target : gpu(target), {.delta = 0.7});
  }, {6, 4}, 2.0);
}

TEST_CASE("logsumexp, cumsum, flip, roll, clamp, where with a scalar and one_hot on CUDA match the CPU") {
  compare("logsumexp", [](const Tensor& x) { return logsumexp(x, {1}); }, {40, 7}, 300.0);
  compare("cumsum", [](const Tensor& x) { return cumsum(x, 1); }, {37, 5});
  compare("flip", [](const Tensor& x) { return flip(x, {0, 1}); }, {6, 9});
  compare("roll", [](const Tensor& x) { return roll(x, {-3, 2}, {0, 1}); }, {6, 9});
  compare("clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, {6, 9});
  compare("clamp min > max", [](const Tensor& x) { return clamp(x, 0.7, -0.5); }, {6, 9});
  compare("where scalar", [](const Tensor& x) { return where(gt(x, x * 0.0), x, -0.5); }, {6, 9});
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 4, 4, 1}, {5});
  check_close(one_hot(idx), one_hot(gpu(idx)), 0, "one_hot");
}
