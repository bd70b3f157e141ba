// SGD against torch.optim.SGD: each variant's first three steps on hand-set gradients, in both
// memory layouts (fused loop and tensor ops); parameter groups; skipped parameters; errors.
#include <doctest/doctest.h>

#include "optim_test_util.h"

using namespace mt;
using namespace mt::optim;
using namespace mt::optim::test;

namespace {

struct SGDCase {
  const char* name;
  SGDOptions options;
  std::vector<double> expected;  // p after steps 1, 2, 3
};

}  // namespace

TEST_CASE("SGD: the first three steps of each variant, by hand and as PyTorch computes them") {
  // p0 = 1, gradients 1, 2, -1, lr = 0.1. The same numbers came out of torch.optim.SGD 1.13 in
  // float64 (tests/optim/torch_reference.py), up to the last digit or two.
  const std::vector<SGDCase> cases = {
      // p = p − lr·g:  1 − 0.1 = 0.9;  0.9 − 0.2 = 0.7;  0.7 + 0.1 = 0.8
      {"plain", {.lr = 0.1}, {0.9, 0.7, 0.8}},
      // b = g on step 1, then b = 0.9·b + g:  b = 1, 2.9, 1.61;  p = 0.9, 0.61, 0.449
      {"momentum", {.lr = 0.1, .momentum = 0.9}, {0.9, 0.61, 0.449}},
      // b = 1 (no dampening on step 1), then b = 0.9·b + 0.5·g:  b = 1, 1.9, 1.21;  p = 0.9, 0.71, 0.589
      {"dampening", {.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, {0.9, 0.71, 0.589}},
      // b as with momentum (1, 2.9, 1.61); step g + 0.9·b = 1.9, 4.61, 0.449;  p = 0.81, 0.349, 0.3041
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}, {0.81, 0.349, 0.3041}},
      // g + 0.1·p = 1.1, 2.089, -0.93189;  p = 0.89, 0.6811, 0.774289
      {"weight decay", {.lr = 0.1, .weight_decay = 0.1}, {0.89, 0.6811, 0.774289}},
  };
  for (const SGDCase& c : cases) {
    for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
      INFO(c.name, ", ", layout_name(layout));
      // Two elements, so that a strided layout exists; both follow the scalar sequence.
      Tensor p = make_param({1, 1}, {2}, kFloat64, layout);
      SGD opt({p}, c.options);
      check_close(run_steps(opt, p, {{1, 1}, {2, 2}, {-1, -1}}), repeat_each(c.expected, 2), 1e-14);
    }
  }
}

TEST_CASE("SGD: a float32 matrix with every option on matches torch.optim.SGD") {
  // Printed by tests/optim/torch_reference.py (torch 1.13, float32).
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.0, 1.0}, {0.2, 0.2, -0.3, -0.1}};
  struct Case {
    SGDOptions options;
    std::vector<std::vector<double>> expected;
  };
  const std::vector<Case> cases = {
      {{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
       {{0.4947499930858612, -1.4892499446868896, 1.9839999675750732, 0.22987499833106995},
        {0.5123023390769958, -1.49015474319458, 1.9687072038650513, 0.16665905714035034},
        {0.5188689231872559, -1.4992985725402832, 1.9675577878952026, 0.11418971419334412}}},
      {{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.05, .nesterov = true},
       {{0.48875001072883606, -1.475250005722046, 1.9639999866485596, 0.21287499368190765},
        {0.5275506377220154, -1.4823113679885864, 1.9423619508743286, 0.10871705412864685},
        {0.5191946625709534, -1.49224054813385, 1.9472389221191406, 0.07432723045349121}}},
  };
  for (const Case& c : cases) {
    for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
      INFO("nesterov=", c.options.nesterov, ", ", layout_name(layout));
      Tensor p = make_param({0.5, -1.5, 2.0, 0.25}, {2, 2}, kFloat32, layout);
      SGD opt({p}, c.options);
      check_close(run_steps(opt, p, grads), c.expected, 1e-6);
    }
  }
}

TEST_CASE("SGD: the fused loop and the tensor ops agree on random data") {
  Generator gen(7);
  for (DType dtype : {kFloat32, kFloat64}) {
    INFO(dtype);
    const std::vector<double> init = randn({5, 7}, gen, {.dtype = kFloat64}).to_vector<double>();
    Tensor fused = make_param(init, {5, 7}, dtype, Layout::Contiguous);
    Tensor ops = make_param(init, {5, 7}, dtype, Layout::Strided);
    const SGDOptions options{.lr = 0.03, .momentum = 0.7, .dampening = 0.2, .weight_decay = 0.05};
    SGD a({fused}, options), b({ops}, options);
    for (int s = 0; s < 4; ++s) {
      const Tensor g = randn({5, 7}, gen, {.dtype = dtype});
      fused.set_grad(g.clone());
      ops.set_grad(g.clone());
      a.step();
      b.step();
    }
    check_close({fused.to_vector<double>()}, {ops.to_vector<double>()}, dtype == kFloat32 ? 1e-6 : 1e-14);
  }
}

TEST_CASE("SGD: each param group has its own options, and parameters without a gradient are skipped") {
  Tensor w = make_param({1, 1}, {2}, kFloat64, Layout::Contiguous);
  Tensor b = make_param({1}, {1}, kFloat64, Layout::Contiguous);
  Tensor frozen = make_param({5}, {1}, kFloat64, Layout::Contiguous);
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  SGDOptions head = opt.defaults();
  head.lr = 1.0;
  opt.add_param_group({b, frozen}, head);
  CHECK(opt.num_param_groups() == 2);
  CHECK(opt.lr(1) == 1.0);

  w.set_grad(ones({2}, {.dtype = kFloat64}));
  b.set_grad(ones({1}, {.dtype = kFloat64}));
  opt.step();  // frozen has no gradient: untouched, and no state is made for it
  CHECK(w.to_vector<double>() == std::vector<double>{0.9, 0.9});
  CHECK(b.item() == 0.0);
  CHECK(frozen.item() == 5.0);
  const StateDict sd = opt.state_dict();
  CHECK(sd.count("state.0.momentum_buffer") == 1);  // w
  CHECK(sd.count("state.1.momentum_buffer") == 1);  // b
  CHECK(sd.count("state.2.momentum_buffer") == 0);  // frozen

  opt.set_lr(0, 0.5);
  CHECK(opt.options(0).lr == 0.5);
  CHECK(opt.options(0).momentum == 0.9);
}

TEST_CASE("zero_grad forgets gradients, or zeroes them in place") {
  Tensor p = make_param({1, 2}, {2}, kFloat32, Layout::Contiguous);
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(ones({2}));
  const Tensor g = p.grad();
  opt.zero_grad(/*set_to_none=*/false);
  CHECK(p.grad().is_same(g));
  CHECK(g.to_vector<double>() == std::vector<double>{0, 0});
  opt.zero_grad();
  CHECK(!p.grad().defined());
  opt.step();  // no gradient: nothing happens
  CHECK(p.to_vector<double>() == std::vector<double>{1, 2});
}

TEST_CASE("SGD: a step counts as an in-place change for autograd") {
  // y = p·p saves p; stepping before backward would make the saved p stale, and the version
  // counter catches it, as with any in-place op.
  Tensor p = make_param({3}, {1}, kFloat32, Layout::Contiguous);
  SGD opt({p}, {.lr = 0.1});
  Tensor y = (p * p).sum();
  p.set_grad(ones({1}));
  opt.step();
  CHECK_THROWS_AS(y.backward(), Error);
}

TEST_CASE("SGD rejects bad options and parameters, naming them") {
  Tensor p = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  auto fails = [&](const SGDOptions& o, const char* message) {
    CHECK_THROWS_WITH_AS(SGD({p}, o), doctest::Contains(message), Error);
  };
  fails({}, "SGD: lr is required and was not given for param group 0");
  fails({.lr = -0.1}, "SGD: invalid learning rate -0.1 for param group 0");
  fails({.lr = 0.1, .momentum = -0.5}, "SGD: invalid momentum -0.5 for param group 0");
  fails({.lr = 0.1, .weight_decay = -1}, "SGD: invalid weight_decay -1 for param group 0");
  fails({.lr = 0.1, .nesterov = true}, "SGD: Nesterov momentum requires a momentum > 0 and zero dampening; "
                                       "param group 0 has momentum 0 and dampening 0");
  fails({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}, "has momentum 0.9 and dampening 0.1");

  SGD opt({p}, {.lr = 0.1});
  Tensor q = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  CHECK_THROWS_WITH_AS(opt.add_param_group({q}, {.lr = -1}), doctest::Contains("for param group 1"), Error);
  CHECK_THROWS_WITH_AS(opt.set_lr(0, -2), doctest::Contains("SGD: invalid learning rate -2 for param group 0"),
                       Error);
  CHECK_THROWS_WITH_AS(opt.add_param_group({q, p}), doctest::Contains("parameter 1 of param group 1 (shape [1]) "
                                                                      "is already in another param group"),
                       Error);
  CHECK_THROWS_WITH_AS(opt.add_param_group({q, q}), doctest::Contains("appears twice"), Error);
  CHECK_THROWS_WITH_AS(SGD({p * p}, {.lr = 0.1}),
                       doctest::Contains("(shape [1]) was computed by MulBackward; only leaf tensors"), Error);
  CHECK_THROWS_WITH_AS(SGD({}, {.lr = 0.1}), doctest::Contains("SGD: got an empty parameter list"), Error);
  CHECK_THROWS_WITH_AS(opt.lr(3), doctest::Contains("SGD: no param group 3 (there are 1)"), Error);
  CHECK(opt.num_param_groups() == 1);  // the failed additions added nothing
}
