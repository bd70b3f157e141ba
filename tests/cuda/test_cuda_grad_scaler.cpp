// GradScaler (optim/grad_scaler.h) on GPU gradients, as `mini_train --gpus --precision fp16` uses it:
// an autocast float16 step on cuda:0 against the same step on the CPU, and the skip on an inf or
// NaN in any of several GPU gradients (the sums of x·0 added up on the device and read back once).
// Needs a GPU (tests/cuda/main.cpp skips otherwise; the emulator runs it anywhere).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "autograd/autocast.h"
#include "cuda_test_util.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"

using namespace mt;
using mt::test::kGpu;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A copy on the host (raw: Tensor::to refuses a parameter, which requires grad).
Tensor host(const Tensor& t) { return raw::to_device(t, kCPU); }

// Linear(6, 3) -> GELU -> Linear(3, 2), float32 master weights on `device`, the same for the same seed.
std::shared_ptr<nn::Sequential> model_on(Device device) {
  manual_seed(4);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(6, 3));
  net->push_back(std::make_shared<nn::GELU>());
  net->push_back(std::make_shared<nn::Linear>(3, 2));
  net->to(device);
  return net;
}

// One step of autocast float16 with loss scaling: returns whether the scaler stepped.
bool fp16_step(nn::Module& net, optim::Optimizer& opt, optim::GradScaler& scaler, const Tensor& x) {
  opt.zero_grad();
  Tensor loss;
  {
    const AutocastGuard autocast(kFloat16);
    loss = net.forward(x).pow(2).mean();
  }
  scaler.scale(loss).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

}  // namespace

TEST_CASE("GradScaler on GPU gradients: an fp16 step as on the CPU, and a skip for an inf in any gradient") {
  Generator gen(11);
  const Tensor x = randn({8, 6}, gen);
  auto cpu_net = model_on(kCPU), gpu_net = model_on(kGpu);
  optim::Adam cpu_opt(cpu_net->parameters(), {.lr = 0.01});
  optim::Adam gpu_opt(gpu_net->parameters(), {.lr = 0.01});
  optim::GradScaler cpu_scaler, gpu_scaler;
  int reductions = 0;
  gpu_scaler.set_found_inf_reduction([&](bool found) {
    ++reductions;
    return found;
  });

  // Clean steps: unscaled on the device and stepped, to the CPU's weights within float16's rounding
  // of the forward (the loss of 2^16 · x·W is reached through 16-bit products on both sides).
  for (int step = 0; step < 2; ++step) {
    CHECK(fp16_step(*cpu_net, cpu_opt, cpu_scaler, x));
    CHECK(fp16_step(*gpu_net, gpu_opt, gpu_scaler, raw::to_device(x, kGpu)));
  }
  CHECK(reductions == 2);
  CHECK(gpu_scaler.get_scale() == 65536.0f);
  const std::vector<Tensor> cpu_params = cpu_net->parameters(), gpu_params = gpu_net->parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO("parameter ", i);
    REQUIRE(gpu_params[i].device() == kGpu);
    const std::vector<float> want = cpu_params[i].to_vector<float>(), got = host(gpu_params[i]).to_vector<float>();
    for (size_t j = 0; j < want.size(); ++j) CHECK(got[j] == doctest::Approx(want[j]).epsilon(2e-3));
    // The gradients were divided by the scale on the GPU: the true ones are small, the scaled ones not.
    const std::vector<float> g = host(gpu_params[i].grad()).to_vector<float>();
    for (float v : g) CHECK(std::abs(v) < 64.0f);
  }

  // An inf in the last gradient only (the others clean): found after every gradient was unscaled,
  // the step skipped (weights and Adam's state as they were), the scale halved.
  for (const Tensor& p : gpu_params) p.set_grad(raw::to_device(full(p.sizes(), 256.0), kGpu));
  raw::fill_(raw::narrow(gpu_params.back().grad().flatten(), 0, 1, 1), kInf);
  std::vector<std::vector<float>> before;
  for (const Tensor& p : gpu_params) before.push_back(host(p).to_vector<float>());
  const double adam_step = gpu_opt.state_dict().at("state.0.step").item();
  CHECK_FALSE(gpu_scaler.step(gpu_opt));
  gpu_scaler.update();
  CHECK(reductions == 3);
  CHECK(gpu_scaler.get_scale() == 32768.0f);
  for (size_t i = 0; i < gpu_params.size(); ++i) {
    INFO("parameter ", i);
    CHECK(host(gpu_params[i]).to_vector<float>() == before[i]);
    if (i + 1 < gpu_params.size())  // unscaled by 2^-16 like the rest, before the skip was decided
      CHECK(host(gpu_params[i].grad()).to_vector<float>() ==
            std::vector<float>(static_cast<size_t>(gpu_params[i].numel()), 256.0f / 65536.0f));
  }
  CHECK(gpu_opt.state_dict().at("state.0.step").item() == adam_step);

  // A NaN in the first gradient: also found; a clean step after it steps again.
  for (const Tensor& p : gpu_params) p.set_grad(raw::to_device(zeros(p.sizes()), kGpu));
  raw::fill_(raw::narrow(gpu_params.front().grad().flatten(), 0, 0, 1), std::nan(""));
  CHECK(optim::detail::unscale_and_check({gpu_params[0].grad(), gpu_params[1].grad()}, 1.0f));
  CHECK(fp16_step(*gpu_net, gpu_opt, gpu_scaler, raw::to_device(x, kGpu)));
  CHECK(gpu_opt.state_dict().at("state.0.step").item() == adam_step + 1);
}
