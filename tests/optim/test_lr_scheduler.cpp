// The schedulers' lr sequences against torch.optim.lr_scheduler, warm-up then cosine, per-group base
// lrs, resuming from a state dict, and option errors.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "optim_test_util.h"

using namespace mt;
using namespace mt::optim;
using namespace mt::optim::test;

namespace {

// The lr of group 0 at epochs 0 .. n-1: epoch 0 is set by the constructor, the rest by step().
std::vector<double> lr_sequence(Optimizer& opt, LRScheduler& sched, int n) {
  std::vector<double> lrs = {opt.lr(0)};
  for (int e = 1; e < n; ++e) {
    sched.step();
    lrs.push_back(opt.lr(0));
    CHECK(sched.get_last_lr()[0] == opt.lr(0));
    CHECK(sched.last_epoch() == e);
  }
  return lrs;
}

Tensor param() { return make_param({0}, {1}, kFloat32, Layout::Contiguous); }

}  // namespace

// Every sequence below is torch.optim.lr_scheduler's (1.13) for a base lr of 0.1, printed by
// tests/optim/torch_reference.py. PyTorch computes them recursively, these closed-form schedules
// directly (Note [Closed form] in lr_scheduler.h); they agree to rounding.

TEST_CASE("StepLR: lr = base · γ^⌊t / step_size⌋") {
  SGD opt({param()}, {.lr = 0.1});
  StepLR sched(opt, {.step_size = 3, .gamma = 0.5});
  check_close({lr_sequence(opt, sched, 12)},
              {{0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125}}, 1e-14);
}

TEST_CASE("CosineAnnealingLR: lr = η_min + (base − η_min)(1 + cos(π·t / t_max)) / 2") {
  SGD opt({param()}, {.lr = 0.1});
  CosineAnnealingLR sched(opt, {.t_max = 10, .eta_min = 0.001});
  // t = 5 is halfway: 0.001 + 0.099 · (1 + cos(π/2)) / 2 = 0.0505; t = 10 reaches η_min, and past
  // t_max the cosine climbs again (t = 11 equals t = 9), as in PyTorch.
  check_close({lr_sequence(opt, sched, 12)},
              {{0.1, 0.09757729755661011, 0.0905463412215599, 0.07959536998847742, 0.0657963412215599, 0.0505,
                0.03520365877844011, 0.02140463001152259, 0.010453658778440109, 0.0034227024433899004, 0.001,
                0.0034227024433899004}},
              1e-13);
}

TEST_CASE("LinearLR: a linear warm-up from start_factor · base to end_factor · base") {
  SGD opt({param()}, {.lr = 0.1});
  LinearLR sched(opt, {.start_factor = 0.25, .total_iters = 4});
  check_close({lr_sequence(opt, sched, 8)}, {{0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1, 0.1}}, 1e-14);
}

TEST_CASE("SequentialLR: warm-up, then cosine from the warm-up's base lr") {
  SGD opt({param()}, {.lr = 0.1});
  LinearLR warmup(opt, {.start_factor = 0.1, .total_iters = 3});
  CosineAnnealingLR cosine(opt, {.t_max = 8});  // made after warmup changed the lr to 0.01
  SequentialLR sched(opt, {warmup, cosine}, {3});
  CHECK(sched.base_lrs() == std::vector<double>{0.1});
  // Epochs 0-2 warm up (0.01, 0.04, 0.07); from epoch 3 the cosine runs from its own epoch 0 at 0.1
  // and reaches 0 at epoch 3 + 8 = 11.
  check_close({lr_sequence(opt, sched, 12)},
              {{0.01, 0.04, 0.07, 0.1, 0.09619397662556434, 0.08535533905932738, 0.0691341716182545, 0.05,
                0.030865828381745515, 0.014644660940672627, 0.0038060233744356634, 0.0}},
              1e-13);
}

TEST_CASE("LambdaLR, and each param group scaled from its own base lr") {
  Tensor a = param(), b = param();
  SGD opt({a}, {.lr = 0.1});
  SGDOptions head = opt.defaults();
  head.lr = 1.0;
  opt.add_param_group({b}, head);
  LambdaLR sched(opt, [](int64_t t) { return 1.0 / (t + 1); });
  sched.step();
  sched.step();
  check_close({sched.get_last_lr()}, {{0.1 / 3, 1.0 / 3}}, 1e-15);
  CHECK(opt.lr(1) == sched.get_last_lr()[1]);
}

TEST_CASE("a scheduler resumes from its state dict") {
  SGD opt({param()}, {.lr = 0.1});
  CosineAnnealingLR sched(opt, {.t_max = 10});
  for (int e = 0; e < 4; ++e) sched.step();
  const StateDict saved = sched.state_dict();
  CHECK(saved.at("last_epoch").item() == 4);
  CHECK(saved.at("base_lrs.0").item() == 0.1);
  CHECK(saved.at("last_epoch").dtype() == kFloat64);

  // A fresh run: new optimizer and scheduler (at epoch 0), then the saved state.
  SGD opt2({param()}, {.lr = 0.1});
  CosineAnnealingLR resumed(opt2, {.t_max = 10});
  resumed.load_state_dict(saved);
  CHECK(resumed.last_epoch() == 4);
  CHECK(opt2.lr(0) == opt.lr(0));
  sched.step();
  resumed.step();
  CHECK(opt2.lr(0) == opt.lr(0));
  CHECK(opt.lr(0) == doctest::Approx(0.05 * (1 + std::cos(std::numbers::pi * 5 / 10))));

  StateDict extra = saved;
  extra["base_lrs.1"] = saved.at("base_lrs.0");
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(extra), doctest::Contains("CosineAnnealingLR: load_state_dict: the "
                                                                         "state dict has 2 base lrs, the optimizer "
                                                                         "has 1 param groups"),
                       Error);
  StateDict missing = saved;
  missing.erase("last_epoch");
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(missing), doctest::Contains("missing key last_epoch"), Error);
  CHECK(resumed.last_epoch() == 5);  // the failed loads changed nothing
}

TEST_CASE("schedulers reject bad options, naming them") {
  SGD opt({param()}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(StepLR(opt, {}), doctest::Contains("StepLR: step_size is required and must be > 0, got 0"),
                       Error);
  CHECK_THROWS_WITH_AS(CosineAnnealingLR(opt, {.t_max = -1}), doctest::Contains("t_max is required and must be > 0"),
                       Error);
  CHECK_THROWS_WITH_AS(LinearLR(opt, {.start_factor = 1.5}),
                       doctest::Contains("start_factor must be in [0, 1], got 1.5"), Error);
  CHECK_THROWS_WITH_AS(LinearLR(opt, {.total_iters = 0}), doctest::Contains("total_iters must be > 0"), Error);
  LinearLR warmup(opt, {});
  CHECK_THROWS_WITH_AS(SequentialLR(opt, {warmup}, {3}), doctest::Contains("needs one milestone fewer than "
                                                                          "schedulers, got 1 schedulers and 1"),
                       Error);
  SGD other({param()}, {.lr = 0.1});
  StepLR foreign(other, {.step_size = 1});
  CHECK_THROWS_WITH_AS(SequentialLR(opt, {warmup, foreign}, {3}),
                       doctest::Contains("scheduler 1 belongs to a different optimizer"), Error);
  CHECK_THROWS_WITH_AS(SequentialLR(opt, {warmup, warmup, warmup}, {3, 3}),
                       doctest::Contains("milestones must be positive and increasing; milestone 1 is 3"), Error);

  opt.add_param_group({param()});
  CHECK_THROWS_WITH_AS(warmup.step(), doctest::Contains("LinearLR: the optimizer has 2 param groups but the "
                                                        "scheduler was made for 1"),
                       Error);
}
