// GradScaler against torch.cuda.amp.GradScaler: the scale and growth count over scripted series of
// clean and inf/NaN steps (tests/optim/grad_scaler_reference.py prints the rows below), the skip
// leaving parameters and Adam's state untouched, unscale-before-clip equal to float32 training, a
// resume from the state dict bit for bit, the fused check against the tensor-op one, and the misuse
// PyTorch refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "nn/nn.h"
#include "optim_test_util.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::optim;
using namespace mt::optim::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One row of grad_scaler_reference.py: the step's kind, then after update(): scale, growth tracker,
// whether the parameter moved, the parameter.
struct Row {
  const char* kind;
  double scale;
  int64_t tracker;
  bool stepped;
  std::vector<double> param;
};

// The script's loop: p = [1, -2] (float32), SGD lr 0.1; step t's gradient is g_t·scale rounded to
// float32 (what backward of scale(loss) gives), g_t = [0.5 + t, -0.25·t], with element 1 set to inf
// ("inf") or element 0 to NaN ("nan").
void check_series(const GradScalerOptions& options, const std::vector<Row>& rows) {
  GradScaler scaler(options);
  Tensor p = make_param({1, -2}, {2}, kFloat32, Layout::Contiguous);
  SGD opt({p}, {.lr = 0.1});
  for (size_t t = 0; t < rows.size(); ++t) {
    const Row& row = rows[t];
    INFO("step ", t, " (", row.kind, ")");
    const float s = scaler.get_scale();
    std::vector<float> g = {(0.5f + static_cast<float>(t)) * s, -0.25f * static_cast<float>(t) * s};
    if (std::string(row.kind) == "inf") g[1] = kInf;
    if (std::string(row.kind) == "nan") g[0] = kNaN;
    p.set_grad(from_vector(g, {2}));
    CHECK(scaler.step(opt) == row.stepped);
    scaler.update();
    CHECK(scaler.get_scale() == row.scale);  // exactly: the scale is a float32, as in PyTorch
    CHECK(scaler.growth_tracker() == row.tracker);
    const std::vector<double> now = p.to_vector<double>();
    CHECK(now[0] == doctest::Approx(row.param[0]).epsilon(1e-7));
    CHECK(now[1] == doctest::Approx(row.param[1]).epsilon(1e-7));
  }
}

// A small model and a batch: the gradients of a float32 step, for the clipping and skip tests.
struct Job {
  std::shared_ptr<nn::Linear> model;
  Tensor x;
  explicit Job(uint64_t seed = 5) {
    manual_seed(seed);
    model = std::make_shared<nn::Linear>(6, 3);
    Generator gen(seed + 1);
    x = mul(randn({16, 6}, gen), 4.0);
  }
  Tensor loss() const { return model->forward(x).pow(2).mean(); }
  std::vector<std::vector<float>> grads() const {
    std::vector<std::vector<float>> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.grad().to_vector<float>());
    return out;
  }
};

}  // namespace

TEST_CASE("GradScaler's scale and growth count follow torch.cuda.amp.GradScaler over a scripted series") {
  SUBCASE("defaults, growth_interval 3") {
    check_series({.growth_interval = 3},
                 {{"ok", 65536.0, 1, true, {0.949999988079071, -2.0}},
                  {"ok", 65536.0, 2, true, {0.800000011920929, -1.975000023841858}},
                  {"ok", 131072.0, 0, true, {0.550000011920929, -1.9250000715255737}},
                  {"inf", 65536.0, 0, false, {0.550000011920929, -1.9250000715255737}},
                  {"ok", 65536.0, 1, true, {0.10000000894069672, -1.8250000476837158}},
                  {"nan", 32768.0, 0, false, {0.10000000894069672, -1.8250000476837158}},
                  {"ok", 32768.0, 1, true, {-0.550000011920929, -1.6750000715255737}},
                  {"ok", 32768.0, 2, true, {-1.3000000715255737, -1.5000001192092896}},
                  {"ok", 65536.0, 0, true, {-2.1500000953674316, -1.3000000715255737}},
                  {"ok", 65536.0, 1, true, {-3.1000001430511475, -1.0750000476837158}},
                  {"ok", 65536.0, 2, true, {-4.150000095367432, -0.8250000476837158}},
                  {"ok", 131072.0, 0, true, {-5.300000190734863, -0.5500000715255737}},
                  {"inf", 65536.0, 0, false, {-5.300000190734863, -0.5500000715255737}},
                  {"inf", 32768.0, 0, false, {-5.300000190734863, -0.5500000715255737}},
                  {"ok", 32768.0, 1, true, {-6.75, -0.20000006258487701}}});
  }
  SUBCASE("factors that are not powers of two round the scale to float32 once per update") {
    check_series({.init_scale = 1000.3, .growth_factor = 3.0, .backoff_factor = 0.3, .growth_interval = 2},
                 {{"ok", 1000.2999877929688, 1, true, {0.949999988079071, -2.0}},
                  {"ok", 3000.89990234375, 0, true, {0.800000011920929, -1.975000023841858}},
                  {"inf", 900.2699584960938, 0, false, {0.800000011920929, -1.975000023841858}},
                  {"ok", 900.2699584960938, 1, true, {0.45000001788139343, -1.899999976158142}},
                  {"ok", 2700.809814453125, 0, true, {1.1175870895385742e-08, -1.7999999523162842}},
                  {"ok", 2700.809814453125, 1, true, {-0.550000011920929, -1.6749999523162842}},
                  {"nan", 810.242919921875, 0, false, {-0.550000011920929, -1.6749999523162842}},
                  {"ok", 810.242919921875, 1, true, {-1.3000000715255737, -1.5}}});
  }
  SUBCASE("growth that would overflow float32 is not taken; an overflowing product is found") {
    // Step 2's 2.5 * 2^127 is inf in float32: a finite loss whose scaled gradient overflows.
    check_series({.init_scale = 0x1p126, .growth_interval = 1},
                 {{"ok", 1.7014118346046923e+38, 0, true, {0.949999988079071, -2.0}},
                  {"ok", 1.7014118346046923e+38, 0, true, {0.800000011920929, -1.975000023841858}},
                  {"ok", 8.507059173023462e+37, 0, false, {0.800000011920929, -1.975000023841858}},
                  {"inf", 4.253529586511731e+37, 0, false, {0.800000011920929, -1.975000023841858}},
                  {"ok", 8.507059173023462e+37, 0, true, {0.3499999940395355, -1.875}}});
  }
}

TEST_CASE("GradScaler's defaults: 2^16, doubled after exactly 2000 clean steps, halved on an inf") {
  GradScalerOptions defaults;
  float scale = static_cast<float>(defaults.init_scale);
  int64_t tracker = 0;
  CHECK(scale == 65536.0f);
  for (int i = 0; i < 1999; ++i) optim::detail::update_scale(scale, tracker, false, defaults);
  CHECK(scale == 65536.0f);
  CHECK(tracker == 1999);
  optim::detail::update_scale(scale, tracker, false, defaults);
  CHECK(scale == 131072.0f);
  CHECK(tracker == 0);
  optim::detail::update_scale(scale, tracker, false, defaults);
  optim::detail::update_scale(scale, tracker, true, defaults);
  CHECK(scale == 65536.0f);
  CHECK(tracker == 0);  // an inf restarts the count
}

TEST_CASE("A step skipped for a NaN leaves the parameters and Adam's moments and step count untouched") {
  Job job;
  Adam opt(job.model->parameters(), {.lr = 0.01});
  GradScaler scaler;
  scaler.scale(job.loss()).backward();
  CHECK(scaler.step(opt));
  scaler.update();
  opt.zero_grad();

  const StateDict state_before = opt.state_dict();
  const StateDict params_before = [&] {
    StateDict out;
    for (const auto& [name, p] : job.model->named_parameters()) out[name] = p.clone();
    return out;
  }();
  scaler.scale(job.loss()).backward();
  raw::fill_(raw::narrow(job.model->weight.grad().flatten(), 0, 4, 1), kNaN);
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 32768.0f);
  for (const auto& [name, p] : job.model->named_parameters()) {
    INFO(name);
    CHECK(p.to_vector<float>() == params_before.at(name).to_vector<float>());
  }
  const StateDict state_after = opt.state_dict();
  REQUIRE(state_after.size() == state_before.size());
  for (const auto& [key, value] : state_before) {
    INFO(key);
    CHECK(state_after.at(key).to_vector<double>() == value.to_vector<double>());
  }
  CHECK(state_after.at("state.0.step").item() == 1);
}

TEST_CASE("unscale_ before clipping gives float32 training's norm and clipped gradients") {
  // Scaling by a power of two is exact (no overflow, no underflow here), so the unscaled gradients
  // are float32's bit for bit, and so are the norm and the clipped gradients.
  Job plain, scaled;
  plain.loss().backward();
  const double norm = clip_grad_norm_(plain.model->parameters(), 0.5);

  SGD opt(scaled.model->parameters(), {.lr = 0.1});
  GradScaler scaler;
  scaler.scale(scaled.loss()).backward();
  CHECK(scaled.model->weight.grad().to_vector<float>() != plain.model->weight.grad().to_vector<float>());
  scaler.unscale_(opt);
  CHECK(opt.clip_grad_norm(0.5) == norm);
  CHECK(norm > 0.5);  // the clip did something
  CHECK(scaled.grads() == plain.grads());
  CHECK(scaler.step(opt));  // step() does not unscale a second time
  scaler.update();
}

TEST_CASE("GradScaler's state dict has PyTorch's keys and a resumed run scales bit for bit") {
  const GradScalerOptions options{.init_scale = 1000.3, .growth_factor = 3.0, .backoff_factor = 0.3,
                                  .growth_interval = 3};
  auto run = [](GradScaler& scaler, int steps, int first) {
    for (int t = first; t < first + steps; ++t) {
      Tensor p = make_param({1}, {1}, kFloat32, Layout::Contiguous);
      SGD opt({p}, {.lr = 0.1});
      p.set_grad(from_vector(std::vector<float>{t % 4 == 3 ? kInf : 1.0f}, {1}));
      scaler.step(opt);
      scaler.update();
    }
  };
  GradScaler straight(options);
  run(straight, 10, 0);

  GradScaler first(options);
  run(first, 6, 0);
  const StateDict sd = first.state_dict();
  CHECK(sd.size() == 5);
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    CHECK(sd.count(key) == 1);
  CHECK(sd.at("scale").item() == first.get_scale());
  CHECK(sd.at("_growth_tracker").item() == 2);  // grown at step 2, an inf at 3, clean at 4 and 5

  GradScaler resumed({.init_scale = 7.0});  // everything but `enabled` comes from the dict
  resumed.load_state_dict(sd);
  CHECK(resumed.options().growth_factor == 3.0);
  CHECK(resumed.options().growth_interval == 3);
  run(resumed, 4, 6);
  CHECK(resumed.get_scale() == straight.get_scale());
  CHECK(resumed.growth_tracker() == straight.growth_tracker());

  StateDict bad = sd;
  bad["_growth_tracker"] = optim::detail::scalar_entry(3);
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(bad), doctest::Contains("_growth_tracker must be a whole number in "
                       "[0, growth_interval), got 3"), Error);
  bad = sd;
  bad["extra"] = optim::detail::scalar_entry(1);
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(bad), doctest::Contains("extra"), Error);
  CHECK(resumed.get_scale() == straight.get_scale());  // a failed load changes nothing
  CHECK_THROWS_WITH_AS(resumed.load_state_dict({}), doctest::Contains("saved by a disabled GradScaler"), Error);
}

TEST_CASE("The fused unscale-and-check finds inf and NaN anywhere and agrees with the tensor-op path") {
  // 3 chunks of the parallel loop and a ragged end; the bad element in the first chunk, the middle
  // one and the last element, in float32 and float64, contiguous and strided (the tensor-op path).
  const int64_t n = 3 * 32768 + 17;
  for (DType dtype : {kFloat32, kFloat64}) {
    for (int64_t bad : {int64_t{-1}, int64_t{5}, int64_t{40000}, n - 1}) {
      for (float value : {kInf, -kInf, kNaN}) {
        INFO(dtype, ", bad element ", bad, " = ", value);
        Generator gen(9);
        const Tensor values = mul(randn({n}, gen), 1e4).to(dtype);
        if (bad >= 0) raw::fill_(raw::narrow(values, 0, bad, 1), value);
        const Tensor contiguous = values.clone();
        const Tensor strided = raw::as_strided(zeros({2 * n}, {.dtype = dtype}), {n}, {2}, 0);
        raw::copy_(strided, values);
        REQUIRE(!strided.is_contiguous());
        CHECK(optim::detail::unscale_and_check({contiguous}, 0x1p-16f) == (bad >= 0));
        CHECK(optim::detail::unscale_and_check({strided}, 0x1p-16f) == (bad >= 0));
        const Tensor expected = mul(values, 0x1p-16);
        if (bad < 0) {
          CHECK(contiguous.to_vector<double>() == expected.to_vector<double>());
          CHECK(strided.to_vector<double>() == expected.to_vector<double>());
        }
      }
    }
  }
}

TEST_CASE("bfloat16 gradients take the tensor-op path: unscaled, and an inf among them found") {
  const Tensor clean = from_vector(std::vector<float>{1024, -3072, 0.5f}, {3}).to(kBFloat16);
  CHECK_FALSE(optim::detail::unscale_and_check({clean}, 0x1p-10f));
  CHECK(clean.dtype() == kBFloat16);
  CHECK(clean.to_vector<float>() == std::vector<float>{1, -3, 0x1p-11f});
  const Tensor bad = from_vector(std::vector<float>{1, kInf, 2}, {3}).to(kBFloat16);
  CHECK(optim::detail::unscale_and_check({clean, bad}, 1.0f));
}

TEST_CASE("The found-inf reduction is asked once per step, and its answer decides for every rank") {
  Tensor p = make_param({1, 2}, {2}, kFloat32, Layout::Contiguous);
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler;
  std::vector<bool> asked;
  bool other_rank_found_inf = true;
  scaler.set_found_inf_reduction([&](bool found) {
    asked.push_back(found);
    return found || other_rank_found_inf;
  });
  p.set_grad(from_vector(std::vector<float>{1, 1}, {2}));
  scaler.unscale_(opt);
  CHECK_FALSE(scaler.step(opt));  // clean here, but another rank found one: skip with it
  scaler.update();
  CHECK(scaler.get_scale() == 32768.0f);
  CHECK(p.to_vector<float>() == std::vector<float>{1, 2});
  CHECK(asked == std::vector<bool>{false});

  other_rank_found_inf = false;
  p.set_grad(from_vector(std::vector<float>{kNaN, 1}, {2}));
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(asked == std::vector<bool>{false, true});
}

TEST_CASE("GradScaler refuses what PyTorch refuses, and a disabled one is a pass-through") {
  Tensor p = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler;
  p.set_grad(from_vector(std::vector<float>{1}, {1}));
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("no optimizer was unscaled or stepped"), Error);
  scaler.unscale_(opt);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("already called on this optimizer"), Error);
  scaler.step(opt);
  CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("step: already called"), Error);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("called after step()"), Error);
  scaler.update();

  Tensor half = make_param({1}, {1}, kFloat16, Layout::Contiguous);
  SGD half_opt({half}, {.lr = 0.1});
  half.set_grad(from_vector(std::vector<float>{1}, {1}).to(kFloat16));
  CHECK_THROWS_WITH_AS(scaler.step(half_opt), doctest::Contains("gradient to unscale is float16"), Error);
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("no optimizer was unscaled"), Error);  // nothing recorded
  CHECK_THROWS_WITH_AS(GradScaler({.growth_factor = 1.0}), doctest::Contains("growth_factor must be > 1"), Error);
  CHECK_THROWS_WITH_AS(GradScaler({.backoff_factor = 1.0}), doctest::Contains("backoff_factor must be in (0, 1)"),
                       Error);
  CHECK_THROWS_WITH_AS(GradScaler({.growth_interval = 0}), doctest::Contains("growth_interval must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(GradScaler({.init_scale = -1}), doctest::Contains("init_scale must be a positive"), Error);

  GradScaler off({.enabled = false});
  const Tensor loss = from_vector(std::vector<float>{2}, {1});
  CHECK(off.scale(loss).is_same(loss));
  CHECK(off.get_scale() == 1.0f);
  p.set_grad(from_vector(std::vector<float>{kInf}, {1}));
  CHECK(off.step(opt));  // no check: the optimizer steps whatever the gradient
  off.update();
  CHECK(off.state_dict().empty());
}

TEST_CASE("GradScaler::scale widens a low-precision loss and multiplies in the graph") {
  Tensor w = make_param({3}, {1}, kFloat32, Layout::Contiguous);
  GradScaler scaler({.init_scale = 1024});
  const Tensor loss = mul(w, w).sum().to(kBFloat16);
  const Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.item() == 9.0 * 1024);
  scaled.backward();
  CHECK(w.grad().item() == 6.0 * 1024);  // d(w²)/dw = 2w, times the scale
}
