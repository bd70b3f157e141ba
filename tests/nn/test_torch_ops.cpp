// The activations, losses and tensor ops of issue 40 against PyTorch 1.13 in float64: each value and
// its input gradient (of sum(y * gy) for a random gy) agree to 1e-9 relative. The reference values
// are in tests/nn/fixtures/ops.safetensors, written by tests/nn/make_ops_fixtures.py; a case named
// "..._t" runs on the transpose of its input, a non-contiguous view, on both sides.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "minitrain.h"
#include "nn/nn.h"
#include "torch_fixtures.h"

using namespace mt;

namespace {

const test::TorchFixtures fx("ops.safetensors");
const auto check_close = test::check_close_to_torch;

// Runs f on the case's x (transposed for "_t"), and checks y and grad_x against PyTorch's.
void check_case(const std::string& name, const std::function<Tensor(const Tensor&)>& f) {
  const Tensor x = fx(name + ".x").clone().requires_grad_();
  const bool transposed = name.size() > 2 && name.substr(name.size() - 2) == "_t";
  const Tensor y = f(transposed ? x.t() : x);
  check_close(y, fx(name + ".y"), name + ": value");
  (y * fx(name + ".gy")).sum().backward();
  check_close(x.grad(), fx(name + ".grad_x"), name + ": gradient");
}

}  // namespace

TEST_CASE("activations equal PyTorch's in value and gradient") {
  check_case("silu", [](const Tensor& x) { return nn::F::silu(x); });
  check_case("silu_t", [](const Tensor& x) { return nn::SiLU()(x); });
  check_case("leaky_relu", [](const Tensor& x) { return nn::LeakyReLU({.negative_slope = 0.2})(x); });
  check_case("elu", [](const Tensor& x) { return nn::F::elu(x, 1.5); });
  check_case("elu_t", [](const Tensor& x) { return nn::ELU({.alpha = 1.5})(x); });
  check_case("softplus", [](const Tensor& x) { return nn::Softplus()(x); });
  check_case("softplus_beta2_thr5", [](const Tensor& x) { return nn::F::softplus(x, 2.0, 5.0); });
  check_case("mish", [](const Tensor& x) { return nn::Mish()(x); });
  check_case("mish_t", [](const Tensor& x) { return nn::F::mish(x); });
  check_case("hardswish", [](const Tensor& x) { return nn::Hardswish()(x); });
}

TEST_CASE("cross_entropy and nll_loss with class weights, ignore_index and label smoothing equal PyTorch's") {
  check_case("ce_weight", [](const Tensor& x) {
    return nn::F::cross_entropy(x, fx("ce_weight.target"), {.weight = fx("ce_weight.weight")});
  });
  check_case("ce_ignore", [](const Tensor& x) { return nn::CrossEntropyLoss()(x, fx("ce_ignore.target")); });
  check_case("ce_smooth", [](const Tensor& x) {
    return nn::CrossEntropyLoss({.label_smoothing = 0.2})(x, fx("ce_smooth.target"));
  });
  for (auto [name, reduction] : {std::pair{"ce_all_mean", nn::kMean}, {"ce_all_sum", nn::kSum}, {"ce_all_none", nn::kNone}}) {
    const std::string n = name;
    check_case(n, [&](const Tensor& x) {
      return nn::F::cross_entropy(x, fx(n + ".target"), {.reduction = reduction, .weight = fx(n + ".weight"),
                                                         .ignore_index = 1, .label_smoothing = 0.1});
    });
  }
  check_case("nll_weight_ignore", [](const Tensor& x) {
    return nn::NLLLoss({.weight = fx("nll_weight_ignore.weight")})(x.log_softmax(1), fx("nll_weight_ignore.target"));
  });
}

TEST_CASE("binary cross-entropy, with probabilities and with logits, equals PyTorch's") {
  check_case("bce", [](const Tensor& x) { return nn::BCELoss()(x, fx("bce.target")); });
  check_case("bce_weight_sum", [](const Tensor& x) {
    return nn::F::binary_cross_entropy(x, fx("bce_weight_sum.target"),
                                       {.reduction = nn::kSum, .weight = fx("bce_weight_sum.weight")});
  });
  // logits of ±800 (e^800 overflows) and 0 (the kink of max(-x, 0)) among them
  check_case("bce_logits", [](const Tensor& x) { return nn::BCEWithLogitsLoss()(x, fx("bce_logits.target")); });
  check_case("bce_logits_pos_weight", [](const Tensor& x) {
    const std::string n = "bce_logits_pos_weight";
    return nn::BCEWithLogitsLoss({.reduction = nn::kNone, .weight = fx(n + ".weight"),
                                  .pos_weight = fx(n + ".pos_weight")})(x, fx(n + ".target"));
  });
}

TEST_CASE("kl_div, smooth_l1_loss and huber_loss equal PyTorch's") {
  check_case("kl_batchmean", [](const Tensor& x) {
    return nn::KLDivLoss({.reduction = nn::kBatchMean})(x, fx("kl_batchmean.target"));
  });
  check_case("kl_mean", [](const Tensor& x) { return nn::F::kl_div(x, fx("kl_mean.target")); });
  check_case("kl_log_target_sum", [](const Tensor& x) {
    return nn::F::kl_div(x, fx("kl_log_target_sum.target"), {.reduction = nn::kSum, .log_target = true});
  });
  check_case("smooth_l1", [](const Tensor& x) { return nn::SmoothL1Loss({.beta = 0.5})(x, fx("smooth_l1.target")); });
  check_case("smooth_l1_none", [](const Tensor& x) {
    return nn::F::smooth_l1_loss(x, fx("smooth_l1_none.target"), {.reduction = nn::kNone});
  });
  check_case("huber_sum", [](const Tensor& x) {
    return nn::HuberLoss({.reduction = nn::kSum, .delta = 0.7})(x, fx("huber_sum.target"));
  });
  check_case("huber_none", [](const Tensor& x) {
    return nn::F::huber_loss(x, fx("huber_none.target"), {.reduction = nn::kNone, .delta = 1.5});
  });
}

TEST_CASE("logsumexp, cumsum, flip, roll, where with a scalar and one_hot equal PyTorch's") {
  check_case("logsumexp_dim1", [](const Tensor& x) { return logsumexp(x, {1}); });
  check_case("logsumexp_dims02_keepdim", [](const Tensor& x) { return logsumexp(x, {0, 2}, true); });  // values ~1000
  check_case("logsumexp_t", [](const Tensor& x) { return logsumexp(x, {-1}); });
  check_case("cumsum_dim1", [](const Tensor& x) { return cumsum(x, 1); });
  check_case("cumsum_t", [](const Tensor& x) { return cumsum(x, 1); });
  check_case("flip_dims02", [](const Tensor& x) { return flip(x, {0, 2}); });
  check_case("flip_t", [](const Tensor& x) { return flip(x, {1}); });
  check_case("roll_dims", [](const Tensor& x) { return roll(x, {2, -1}, {0, 2}); });
  check_case("roll_flat", [](const Tensor& x) { return roll(x, {7}); });
  check_case("roll_t", [](const Tensor& x) { return roll(x, {-4}, {0}); });
  check_case("where_scalar_right", [](const Tensor& x) { return where(fx("where_scalar_right.cond"), x, 0.5); });
  check_case("where_scalar_left", [](const Tensor& x) { return where(fx("where_scalar_left.cond"), -2.0, x); });
  check_close(one_hot(fx("one_hot.indices")), fx("one_hot.y"), "one_hot");
  check_close(one_hot(fx("one_hot.indices"), 6), fx("one_hot6.y"), "one_hot, 6 classes");
}
