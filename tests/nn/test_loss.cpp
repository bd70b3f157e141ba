// Losses: values and gradients against PyTorch, gradcheck in float64, numerical stability, the
// errors for bad targets, and an MLP that learns with them.
//
// Reference values come from PyTorch 1.13 (Debian's python3-torch), in float64:
//   logits = torch.tensor([[1, 2, 0.5, -1], [0, 0, 0, 0], [3, -2, 1, 0.25]], dtype=torch.float64,
//                         requires_grad=True)
//   t = torch.tensor([0, 3, 1])
//   l = F.cross_entropy(logits, t); l.backward()   # l.item(), logits.grad
//   F.cross_entropy(logits, t, reduction='sum'), F.cross_entropy(logits, t, reduction='none')
//   F.cross_entropy(torch.tensor([[1000., 0, -1000], [-500, 500, 0]]), torch.tensor([0, 0]))
//   a = torch.tensor([[0.5, -1], [2, 0]]); b = torch.tensor([[1., 1], [-1, 0.5]])
//   F.mse_loss(a, b), F.mse_loss(a, b, reduction='sum'), F.mse_loss(a, b, reduction='none')
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "minitrain.h"
#include "tests/autograd/gradcheck_case.h"
#include "nn/nn.h"

using namespace mt;

namespace {

Tensor logits_f64() {
  const std::vector<double> v = {1.0, 2.0, 0.5, -1.0, 0.0, 0.0, 0.0, 0.0, 3.0, -2.0, 1.0, 0.25};
  return from_vector(v, {3, 4}).requires_grad_();
}
Tensor target_classes() { return from_vector(std::vector<int64_t>{0, 3, 1}, {3}); }

void check_close(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  const std::vector<double> v = t.to_vector<double>();
  REQUIRE(v.size() == expected.size());
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == doctest::Approx(expected[i]).epsilon(tol));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("CrossEntropyLoss: values and gradient match PyTorch") {
  const Tensor logits = logits_f64();
  const Tensor loss = nn::CrossEntropyLoss()(logits, target_classes());
  CHECK(loss.dim() == 0);
  CHECK(loss.item() == doctest::Approx(2.689595420840206).epsilon(1e-12));
  loss.backward();
  // (softmax(logits) - onehot(target)) / N
  check_close(logits.grad(), {-0.25859739398393294, 0.20315334586629236, 0.045329638597835176, 0.010114409519805408,
                              0.08333333333333333, 0.08333333333333333, 0.08333333333333333, -0.25,
                              0.27639554864304383, -0.33147099477579334, 0.037406069860945294, 0.017669376271804295});

  CHECK(nn::CrossEntropyLoss({.reduction = nn::kSum})(logits, target_classes()).item() ==
        doctest::Approx(8.068786262520618).epsilon(1e-12));
  check_close(nn::F::cross_entropy(logits, target_classes(), {.reduction = nn::kNone}),
              {1.495181898085856, 1.3862943611198906, 5.18731000331487});
}

TEST_CASE("CrossEntropyLoss: stable for huge logits (log-softmax subtracts the row max)") {
  const Tensor big = from_vector(std::vector<float>{1000.0f, 0.0f, -1000.0f, -500.0f, 500.0f, 0.0f}, {2, 3});
  const Tensor target = from_vector(std::vector<int64_t>{0, 0}, {2});
  CHECK(nn::F::cross_entropy(big, target).item() == doctest::Approx(500.0));  // PyTorch: 500.0
}

TEST_CASE("losses: gradcheck in float64") {
  Generator gen(21);
  const Tensor x = (rand({5, 4}, gen, {.dtype = kFloat64}) * 4.0 - 2.0).requires_grad_();
  const Tensor t = from_vector(std::vector<int64_t>{3, 0, 1, 1, 2}, {5});
  using V = const std::vector<Tensor>&;
  for (nn::Reduction r : {nn::kMean, nn::kSum, nn::kNone}) {
    CAPTURE(nn::reduction_name(r));
    GradcheckResult ce = gradcheck([&](V v) { return nn::F::cross_entropy(v[0], t, {.reduction = r}); }, {x});
    INFO(ce.message);
    CHECK(ce.ok);
    GradcheckResult nll = gradcheck([&](V v) { return nn::F::nll_loss(v[0], t, {.reduction = r}); }, {x});
    INFO(nll.message);
    CHECK(nll.ok);
    const Tensor y = rand({5, 4}, gen, {.dtype = kFloat64});
    GradcheckResult mse = gradcheck([&](V v) { return nn::F::mse_loss(v[0], y, {.reduction = r}); }, {x});
    INFO(mse.message);
    CHECK(mse.ok);
  }
}

TEST_CASE("losses of issue 40: gradcheck in float64 in input and target, every reduction, a transposed input") {
  Generator gen(40);
  using V = const std::vector<Tensor>&;
  const auto check = &test::check_gradcheck;
  auto uniform = [&](const Shape& s, double lo, double hi) {
    return (rand(s, gen, {.dtype = kFloat64}) * (hi - lo) + lo).requires_grad_();
  };
  const Tensor t = from_vector(std::vector<int64_t>{3, 0, -100, 1, 2}, {5});
  const Tensor w = from_vector(std::vector<double>{0.5, 2.0, 1.0, 0.0}, {4});  // a zero weight too
  for (nn::Reduction r : {nn::kMean, nn::kSum, nn::kNone}) {
    CAPTURE(nn::reduction_name(r));
    const Tensor logits = uniform({5, 4}, -2, 2), logits_t = uniform({4, 5}, -2, 2);
    check([&](V v) { return nn::F::cross_entropy(v[0], t, {.reduction = r, .weight = w, .label_smoothing = 0.3}); },
          {logits});
    check([&](V v) { return nn::F::cross_entropy(v[0].t(), t, {.reduction = r, .label_smoothing = 0.1}); }, {logits_t});
    check([&](V v) { return nn::F::nll_loss(v[0], t, {.reduction = r, .weight = w}); }, {logits});
    // probabilities away from 0 and 1, where the clamp at log = -100 would flatten the loss
    check([&](V v) { return nn::F::binary_cross_entropy(v[0], v[1], {.reduction = r}); },
          {uniform({3, 4}, 0.05, 0.95), uniform({3, 4}, 0, 1)});
    check([&](V v) { return nn::F::binary_cross_entropy(v[0].t(), v[1], {.reduction = r, .weight = v[2]}); },
          {uniform({4, 3}, 0.05, 0.95), uniform({3, 4}, 0, 1), uniform({4}, 0.5, 2)});
    check([&](V v) {
      return nn::F::binary_cross_entropy_with_logits(v[0], v[1], {.reduction = r, .weight = v[2], .pos_weight = v[3]});
    }, {uniform({3, 4}, -6, 6), uniform({3, 4}, 0, 1), uniform({4}, 0.5, 2), uniform({4}, 0.5, 3)});
    check([&](V v) { return nn::F::binary_cross_entropy_with_logits(v[0].t(), v[1], {.reduction = r}); },
          {uniform({4, 3}, -6, 6), uniform({3, 4}, 0, 1)});
    check([&](V v) { return nn::F::kl_div(v[0], v[1], {.reduction = r}); }, {uniform({3, 4}, -3, 0), uniform({3, 4}, 0.1, 1)});
    check([&](V v) { return nn::F::kl_div(v[0].t(), v[1], {.reduction = r, .log_target = true}); },
          {uniform({4, 3}, -3, 0), uniform({3, 4}, -3, 0)});
    check([&](V v) { return nn::F::smooth_l1_loss(v[0], v[1], {.reduction = r, .beta = 0.5}); },
          {uniform({3, 4}, -2, 2), uniform({3, 4}, -2, 2)});
    check([&](V v) { return nn::F::huber_loss(v[0].t(), v[1], {.reduction = r, .delta = 0.8}); },
          {uniform({4, 3}, -2, 2), uniform({3, 4}, -2, 2)});
  }
  const Tensor logq = uniform({3, 4}, -3, 0);
  check([&](V v) { return nn::F::kl_div(v[0], v[1], {.reduction = nn::kBatchMean}); }, {logq, uniform({3, 4}, 0.1, 1)});
}

TEST_CASE("losses of issue 40: edge cases") {
  // every target ignored: 0/0, NaN, as PyTorch's mean
  const Tensor logits = zeros({2, 3}, {.dtype = kFloat64});
  const Tensor all_ignored = from_vector(std::vector<int64_t>{-100, -100}, {2});
  CHECK(std::isnan(nn::F::cross_entropy(logits, all_ignored).item()));
  CHECK(nn::F::cross_entropy(logits, all_ignored, {.reduction = nn::kSum}).item() == 0.0);
  // kl_div: a target of exactly 0 contributes 0 and its gradient is finite
  const Tensor q = from_vector(std::vector<double>{-1.0, -2.0}, {2}).requires_grad_();
  const Tensor p = from_vector(std::vector<double>{0.0, 1.0}, {2}).requires_grad_();
  const Tensor kl = nn::F::kl_div(q, p, {.reduction = nn::kSum});
  CHECK(kl.item() == doctest::Approx(2.0));  // 0 + 1·(log 1 - (-2))
  kl.backward();
  for (double g : p.grad().to_vector<double>()) CHECK(std::isfinite(g));
  // BCE at probabilities 0 and 1: the logs are clamped at -100, as PyTorch
  const Tensor ends = from_vector(std::vector<double>{0.0, 1.0}, {2});
  CHECK(nn::F::binary_cross_entropy(ends, from_vector(std::vector<double>{1.0, 0.0}, {2})).item() == 100.0);
  // 'batchmean' is kl_div's only
  CHECK(error_of([&] { nn::F::smooth_l1_loss(ends, ends, {.reduction = nn::kBatchMean}); })
            .find("smooth_l1_loss: reduction 'batchmean' is kl_div's only") != std::string::npos);
  std::ostringstream s;
  s << nn::CrossEntropyLoss({.ignore_index = 0, .label_smoothing = 0.1}) << ' ' << nn::KLDivLoss({.reduction = nn::kBatchMean})
    << ' ' << nn::HuberLoss({.delta = 0.5});
  CHECK(s.str() == "CrossEntropyLoss(reduction=mean, ignore_index=0, label_smoothing=0.1) "
                   "KLDivLoss(reduction=batchmean) HuberLoss(reduction=mean, delta=0.5)");
}

TEST_CASE("NLLLoss on log_softmax equals CrossEntropyLoss") {
  const Tensor logits = logits_f64();
  const Tensor nll = nn::NLLLoss()(logits.log_softmax(1), target_classes());
  CHECK(nll.item() == doctest::Approx(2.689595420840206).epsilon(1e-12));
  // Without log_softmax it is just -x[i, t[i]], averaged: -(1 + 0 + -2) / 3.
  CHECK(nn::F::nll_loss(logits, target_classes()).item() == doctest::Approx(1.0 / 3.0));
}

TEST_CASE("MSELoss: values match PyTorch for each reduction") {
  const Tensor a = from_vector(std::vector<float>{0.5f, -1.0f, 2.0f, 0.0f}, {2, 2});
  const Tensor b = from_vector(std::vector<float>{1.0f, 1.0f, -1.0f, 0.5f}, {2, 2});
  CHECK(nn::MSELoss()(a, b).item() == doctest::Approx(3.375));
  CHECK(nn::MSELoss({.reduction = nn::kSum})(a, b).item() == doctest::Approx(13.5));
  check_close(nn::MSELoss({.reduction = nn::kNone})(a, b), {0.25, 4.0, 9.0, 0.25});
}

TEST_CASE("MSELoss: the fused node equals the composite sub, pow, mean, and mixed dtypes get their own grads") {
  Generator gen(11);
  const Tensor x = randn({7, 3}, gen, {.requires_grad = true});
  const Tensor y = randn({7, 3}, gen, {.dtype = kFloat64, .requires_grad = true});
  const Tensor fused = nn::F::mse_loss(x, y);
  const Tensor composite = (x.to(kFloat64) - y).pow(2).mean();
  CHECK(fused.item() == doctest::Approx(composite.item()).epsilon(1e-6));
  fused.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(y.grad().dtype() == kFloat64);
  const std::vector<double> gx = x.grad().to_vector<double>(), gy = y.grad().to_vector<double>();
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < gx.size(); ++i) {
    CHECK(gx[i] == doctest::Approx(2.0 * (xv[i] - yv[i]) / 21.0).epsilon(1e-5));  // d/dx mean((x-y)²)
    CHECK(gy[i] == doctest::Approx(-gx[i]).epsilon(1e-5));
  }
}

TEST_CASE("losses: clear errors for wrong targets") {
  const Tensor logits = zeros({4, 3});
  CHECK(error_of([&] { nn::F::cross_entropy(logits, zeros({4})); })
            .find("cross_entropy: target must hold int64 class indices, got float32") != std::string::npos);
  CHECK(error_of([&] { nn::F::cross_entropy(logits, zeros({4, 1}, {.dtype = kInt64})); })
            .find("target must be (N) = [4] class indices for input [4, 3], got shape [4, 1]") != std::string::npos);
  CHECK(error_of([&] { nn::F::cross_entropy(zeros({3}), zeros({1}, {.dtype = kInt64})); })
            .find("input must be (N, C) scores") != std::string::npos);
  const Tensor bad = from_vector(std::vector<int64_t>{0, 2, 3, 1}, {4});
  CHECK(error_of([&] { nn::F::cross_entropy(logits, bad); })
            .find("cross_entropy: target[2] = 3 is out of range for 3 classes (valid class indices are 0..2)") !=
        std::string::npos);
  const Tensor negative = from_vector(std::vector<int64_t>{0, -1, 0, 0}, {4});
  CHECK(error_of([&] { nn::NLLLoss()(logits, negative); }).find("nll_loss: target[1] = -1") != std::string::npos);
  CHECK(error_of([&] { nn::MSELoss()(zeros({8, 1}), zeros({8})); })
            .find("mse_loss: input [8, 1] and target [8] must have the same shape") != std::string::npos);
}

TEST_CASE("an MLP learns a two-class problem with cross-entropy and plain SGD") {
  // Points in 2-D, class 1 inside the unit circle: not linearly separable, easy for one hidden layer.
  manual_seed(31);
  Generator gen(32);
  const Tensor x = rand({256, 2}, gen) * 4.0 - 2.0;
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<int64_t> labels(256);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = xs[2 * i] * xs[2 * i] + xs[2 * i + 1] * xs[2 * i + 1] < 1.5;
  const Tensor y = from_vector(labels, {256});

  std::shared_ptr<nn::Loss> loss_fn = std::make_shared<nn::CrossEntropyLoss>();
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 2));
  double first = 0, last = 0;
  for (int step = 0; step < 500; ++step) {
    model->zero_grad();
    const Tensor loss = (*loss_fn)(model->forward(x), y);
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor p : model->parameters()) p.add_(p.grad(), -0.5);
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(first > 0.6);
  CHECK(last < 0.2);
  const Tensor predicted = model->forward(x).argmax(1);
  CHECK(eq(predicted, y).sum().item() > 0.95 * 256);
}
