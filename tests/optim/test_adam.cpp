// Adam and AdamW against torch.optim: bias correction on the first steps, L2 against decoupled
// weight decay, amsgrad, both memory layouts (fused loop and tensor ops), skipped parameters, errors.
#include <doctest/doctest.h>

#include "optim_test_util.h"

using namespace mt;
using namespace mt::optim;
using namespace mt::optim::test;

namespace {
const std::vector<std::vector<double>> kScalarGrads = {{1, 1}, {2, 2}, {-1, -1}};
}  // namespace

TEST_CASE("Adam: the first three steps, with bias correction") {
  // p0 = 1, gradients 1, 2, -1, lr = 0.1, β = (0.9, 0.999), ε = 1e-8:
  //   t=1: m = 0.1,   v = 0.001,       m̂ = 0.1/0.1 = 1,          v̂ = 0.001/0.001 = 1
  //        p = 1 − 0.1·1/(1 + 1e-8)                               = 0.900000001
  //   t=2: m = 0.29,  v = 0.004999,    m̂ = 0.29/0.19 = 1.526316,   v̂ = 0.004999/0.001999 = 2.500750
  //        p = 0.900000001 − 0.1·1.526316/(1.581376 + 1e-8)      = 0.8034817990281663
  //   t=3: m = 0.161, v = 0.005994001, m̂ = 0.161/0.271 = 0.594096, v̂ = 0.005994001/0.002997001 = 2.0000
  //        p = 0.8034818 − 0.1·0.594096/(1.414213 + 1e-8)        = 0.7614728689681868
  // Without bias correction the first step would be 0.1·0.1/(√0.001) ≈ 0.316 instead of 0.1.
  // torch.optim.Adam (1.13, float64) prints the same three numbers (tests/optim/torch_reference.py).
  const std::vector<double> expected = {0.900000001, 0.8034817990281663, 0.7614728689681868};
  for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
    INFO(layout_name(layout));
    Tensor p = make_param({1, 1}, {2}, kFloat64, layout);
    Adam opt({p}, {.lr = 0.1});
    check_close(run_steps(opt, p, kScalarGrads), repeat_each(expected, 2), 1e-14);
  }
}

TEST_CASE("Adam adds weight decay to the gradient, AdamW decays the weight apart from the gradient") {
  // Same p0, gradients and lr as above, λ = 0.1.
  // Adam (L2): the gradient becomes g + 0.1·p = 1.1 on step 1, and m̂/√v̂ = 1.1/1.1 = 1, so the first
  // step is still lr = 0.1 (up to ε): p = 0.9000000009090909. The decay only shows later, rescaled.
  // AdamW: p = p·(1 − 0.1·0.1) first, then the plain Adam step: p = 0.99 − 0.099999999 = 0.890000001;
  //   steps 2 and 3 subtract the same Adam updates as the test above from the decayed weights.
  // Both sequences: torch.optim.Adam / AdamW 1.13, float64 (tests/optim/torch_reference.py).
  const std::vector<double> adam = {0.9000000009090909, 0.8029473346876735, 0.7562370580113803};
  const std::vector<double> adamw = {0.890000001, 0.7845817990181663, 0.7347270509680051};
  for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
    INFO(layout_name(layout));
    Tensor p = make_param({1, 1}, {2}, kFloat64, layout);
    Adam l2({p}, {.lr = 0.1, .weight_decay = 0.1});
    check_close(run_steps(l2, p, kScalarGrads), repeat_each(adam, 2), 1e-14);

    Tensor q = make_param({1, 1}, {2}, kFloat64, layout);
    AdamW decoupled({q}, {.lr = 0.1, .weight_decay = 0.1});
    check_close(run_steps(decoupled, q, kScalarGrads), repeat_each(adamw, 2), 1e-14);
  }
}

TEST_CASE("Adam and AdamW with amsgrad on a float32 matrix match torch.optim") {
  // Printed by tests/optim/torch_reference.py (torch 1.13, float32).
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.0, 1.0}, {0.2, 0.2, -0.3, -0.1}};
  const std::vector<std::vector<double>> adam = {
      {0.49000006914138794, -1.4900000095367432, 1.9900000095367432, 0.24000002443790436},
      {0.4953598380088806, -1.4860836267471313, 1.9810826778411865, 0.23050881922245026},
      {0.4955604374408722, -1.4843138456344604, 1.976133942604065, 0.22429093718528748}};
  const std::vector<std::vector<double>> adamw = {
      {0.4895000159740448, -1.4884999990463257, 1.9880000352859497, 0.2397499978542328},
      {0.49499404430389404, -1.4886388778686523, 1.979314923286438, 0.2301131784915924},
      {0.49647101759910583, -1.491603136062622, 1.9781943559646606, 0.2232411652803421}};
  const std::vector<double> p0 = {0.5, -1.5, 2.0, 0.25};
  for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
    INFO(layout_name(layout));
    Tensor p = make_param(p0, {2, 2}, kFloat32, layout);
    Adam a({p}, {.lr = 0.01, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true});
    check_close(run_steps(a, p, grads), adam, 1e-6);

    Tensor q = make_param(p0, {2, 2}, kFloat32, layout);
    AdamW w({q}, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
    check_close(run_steps(w, q, grads), adamw, 1e-6);
  }
}

TEST_CASE("Adam: the fused loop and the tensor ops agree on random data") {
  Generator gen(11);
  for (DType dtype : {kFloat32, kFloat64}) {
    INFO(dtype);
    const std::vector<double> init = randn({4, 9}, gen, {.dtype = kFloat64}).to_vector<double>();
    Tensor fused = make_param(init, {4, 9}, dtype, Layout::Contiguous);
    Tensor ops = make_param(init, {4, 9}, dtype, Layout::Strided);
    const AdamWOptions options{.lr = 0.05, .betas = {0.85, 0.95}, .weight_decay = 0.2, .amsgrad = true};
    AdamW a({fused}, options), b({ops}, options);
    for (int s = 0; s < 5; ++s) {
      const Tensor g = randn({4, 9}, gen, {.dtype = dtype});
      fused.set_grad(g.clone());
      ops.set_grad(g.clone());
      a.step();
      b.step();
    }
    check_close({fused.to_vector<double>()}, {ops.to_vector<double>()}, dtype == kFloat32 ? 1e-5 : 1e-12);
  }
}

TEST_CASE("Adam: a parameter without a gradient keeps its step count") {
  Tensor a = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  Tensor b = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  Adam opt({a, b});
  a.set_grad(ones({1}));
  opt.step();
  opt.step();
  b.set_grad(ones({1}));
  opt.step();
  const StateDict sd = opt.state_dict();
  CHECK(sd.at("state.0.step").item() == 3);
  CHECK(sd.at("state.1.step").item() == 1);  // b's bias correction starts at its own first step
}

TEST_CASE("Adam and AdamW reject bad options, naming them") {
  Tensor p = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  CHECK_THROWS_WITH_AS(Adam({p}, {.lr = -1}),
                       doctest::Contains("Adam: invalid learning rate -1 for param group 0"), Error);
  CHECK_THROWS_WITH_AS(
      Adam({p}, {.betas = {1.0, 0.999}}),
      doctest::Contains("Adam: invalid beta1 (betas.first) 1 for param group 0; it must be in [0, 1)"), Error);
  CHECK_THROWS_WITH_AS(AdamW({p}, {.betas = {0.9, -0.1}}),
                       doctest::Contains("AdamW: invalid beta2 (betas.second) -0.1 for param group 0"), Error);
  CHECK_THROWS_WITH_AS(Adam({p}, {.eps = -1e-8}), doctest::Contains("Adam: invalid eps -1e-08"), Error);
  CHECK_THROWS_WITH_AS(AdamW({p}, {.weight_decay = -0.01}), doctest::Contains("AdamW: invalid weight_decay -0.01"),
                       Error);
  CHECK(AdamW({p}).defaults().weight_decay == 0.01);  // torch.optim.AdamW's default
  CHECK(Adam({p}).defaults().weight_decay == 0.0);
}

// Note [Options are aggregates] (optim/optimizer.h): designated initialisers, plus libtorch's
// one-argument form AdamOptions(lr) through C++20's parenthesised aggregate initialisation. There
// are no chained setters; the static_assert fails if one ever replaces a field, so that the Note and
// the README's options section are revisited with it.
template <typename O>
concept ChainsLr = requires(O o) { o.lr(1e-3); };
static_assert(!ChainsLr<AdamOptions> && !ChainsLr<AdamWOptions> && !ChainsLr<SGDOptions>);

TEST_CASE("options take designated initialisers and libtorch's Options(lr)") {
  Tensor p = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  CHECK(Adam({p}, AdamOptions(3e-4)).lr(0) == 3e-4);
  CHECK(AdamW({p}, AdamWOptions(3e-4)).defaults().weight_decay == 0.01);
  CHECK(SGD({p}, SGDOptions(0.1)).lr(0) == 0.1);
  const Adam opt({p}, {.lr = 3e-4, .betas = {0.9, 0.95}, .weight_decay = 0.1});
  CHECK(opt.defaults().betas == std::pair{0.9, 0.95});
  CHECK(opt.defaults().eps == 1e-8);  // what the initialiser leaves out keeps its default
}
