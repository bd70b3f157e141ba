// Optimizer state dicts: the key layout (Note [Optimizer state dict]), resuming mid-run through a
// safetensors encoding (as from a checkpoint file) with the same result as an uninterrupted run,
// and loads that fail loudly and change nothing.
#include <doctest/doctest.h>

#include <functional>
#include <memory>

#include "nn/safetensors.h"
#include "optim_test_util.h"

using namespace mt;
using namespace mt::optim;
using namespace mt::optim::test;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

// A weight (3, 4) and a bias (3). The bias gets no gradient in the first three steps, so when the
// run is interrupted after step 3 it has no state yet: both kinds of parameter are resumed.
struct Model {
  Tensor w, b;
  Model() {
    Generator gen(3);
    w = randn({3, 4}, gen).requires_grad_();
    b = randn({3}, gen).requires_grad_();
  }
  // A copy with its own storage: the same values, as if read back from a checkpoint.
  Model(const Model& other)
      : w(other.w.detach().clone().requires_grad_()), b(other.b.detach().clone().requires_grad_()) {}
  std::vector<Tensor> params() const { return {w, b}; }

  // Step s (from 1) of a fixed gradient sequence.
  void set_grads(int s) const {
    Generator gen(100 + s);
    w.set_grad(randn({3, 4}, gen));
    b.set_grad(s > 3 ? randn({3}, gen) : Tensor());
  }
};

void run(Optimizer& opt, const Model& m, int first, int last) {
  for (int s = first; s <= last; ++s) {
    m.set_grads(s);
    opt.step();
  }
}

// The state as a resumed run reads it: through the bytes of a safetensors file (the checkpoint format).
StateDict through_safetensors(const StateDict& sd) {
  const std::string bytes = encode_safetensors(NamedTensors(sd.begin(), sd.end()));
  const SafetensorsFile file =
      decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "<memory>");
  return StateDict(file.tensors.begin(), file.tensors.end());
}

void check_round_trip(const MakeOptimizer& make) {
  Model straight;
  Model interrupted(straight);
  auto a = make(straight.params());
  run(*a, straight, 1, 6);

  auto before = make(interrupted.params());
  run(*before, interrupted, 1, 3);
  const StateDict saved = through_safetensors(before->state_dict());
  before.reset();
  // A new process: same parameter values (they come from the model checkpoint), fresh optimizer.
  Model resumed(interrupted);
  auto after = make(resumed.params());
  after->load_state_dict(saved);
  run(*after, resumed, 4, 6);

  CHECK(resumed.w.to_vector<float>() == straight.w.to_vector<float>());
  CHECK(resumed.b.to_vector<float>() == straight.b.to_vector<float>());
}

}  // namespace

TEST_CASE("state_dict round trip: a resumed run equals an uninterrupted one, bit for bit") {
  SUBCASE("SGD with Nesterov momentum and weight decay") {
    check_round_trip([](std::vector<Tensor> ps) {
      return std::make_unique<SGD>(std::move(ps), SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01,
                                                             .nesterov = true});
    });
  }
  SUBCASE("Adam with amsgrad") {
    check_round_trip([](std::vector<Tensor> ps) {
      return std::make_unique<Adam>(std::move(ps), AdamOptions{.lr = 0.01, .amsgrad = true});
    });
  }
  SUBCASE("AdamW") {
    check_round_trip([](std::vector<Tensor> ps) { return std::make_unique<AdamW>(std::move(ps)); });
  }
}

TEST_CASE("the state dict's keys: hyperparameters per group, buffers per parameter, numbers as 0-dim float64") {
  Model m;
  Adam opt({m.w}, {.lr = 0.01});
  opt.add_param_group({m.b}, {.lr = 0.5, .betas = {0.8, 0.9}});
  m.set_grads(1);  // w only
  opt.step();
  const StateDict sd = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, value] : sd) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{
                    "param_groups.0.amsgrad", "param_groups.0.beta1", "param_groups.0.beta2", "param_groups.0.eps",
                    "param_groups.0.lr", "param_groups.0.num_params", "param_groups.0.weight_decay",
                    "param_groups.1.amsgrad", "param_groups.1.beta1", "param_groups.1.beta2", "param_groups.1.eps",
                    "param_groups.1.lr", "param_groups.1.num_params", "param_groups.1.weight_decay",
                    "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step"});
  CHECK(sd.at("param_groups.1.lr").item() == 0.5);
  CHECK(sd.at("param_groups.1.lr").dim() == 0);
  CHECK(sd.at("param_groups.1.lr").dtype() == kFloat64);
  CHECK(sd.at("state.0.step").item() == 1);
  CHECK(sd.at("state.0.exp_avg").sizes() == Shape{3, 4});
  CHECK(sd.at("state.0.exp_avg").dtype() == kFloat32);
  // A snapshot: later steps do not change it.
  const std::vector<float> m1 = sd.at("state.0.exp_avg").to_vector<float>();
  m.set_grads(2);
  opt.step();
  CHECK(sd.at("state.0.exp_avg").to_vector<float>() == m1);
}

TEST_CASE("loading restores the hyperparameters (a scheduler's lr included)") {
  Model m;
  SGD a({m.w, m.b}, {.lr = 0.1, .momentum = 0.9});
  StepLR sched(a, {.step_size = 1, .gamma = 0.5});
  sched.step();
  sched.step();
  SGD b({m.w, m.b}, {.lr = 0.1, .momentum = 0.9});
  b.load_state_dict(a.state_dict());
  CHECK(b.lr(0) == 0.025);
}

TEST_CASE("load_state_dict names what does not match, and changes nothing when it fails") {
  Model m;
  SGD opt({m.w, m.b}, {.lr = 0.1, .momentum = 0.9});
  m.set_grads(4);
  opt.step();
  const StateDict good = opt.state_dict();

  auto fails = [&](Optimizer& target, const StateDict& sd, const char* message) {
    CHECK_THROWS_WITH_AS(target.load_state_dict(sd), doctest::Contains(message), Error);
  };

  StateDict missing = good;
  missing.erase("param_groups.0.momentum");
  fails(opt, missing, "SGD: load_state_dict: missing key param_groups.0.momentum");

  StateDict unexpected = good;
  unexpected["state.0.exp_avg"] = good.at("state.0.momentum_buffer");
  fails(opt, unexpected, "SGD: load_state_dict: unexpected key state.0.exp_avg");

  StateDict bad_value = good;
  bad_value["param_groups.0.lr"] = scalar_tensor(-1, {.dtype = kFloat64});
  fails(opt, bad_value, "SGD: invalid learning rate -1 for param group 0");

  Tensor wt = make_param(std::vector<double>(12, 0.0), {4, 3}, kFloat32, Layout::Contiguous);
  SGD transposed({wt, m.b}, {.lr = 0.1, .momentum = 0.9});
  fails(transposed, good, "SGD: load_state_dict: state.0.momentum_buffer has shape [3, 4] but parameter 0 has "
                          "shape [4, 3]");

  SGD fewer({m.w}, {.lr = 0.1, .momentum = 0.9});
  fails(fewer, good, "SGD: load_state_dict: param group 0's parameter count has 2 in the state dict but 1 here");

  SGD more_groups({m.w}, {.lr = 0.1, .momentum = 0.9});
  more_groups.add_param_group({m.b});
  fails(more_groups, good, "SGD: load_state_dict: the state dict has 1 param groups, this optimizer has 2");

  Adam adam({m.w, m.b});
  fails(adam, good, "Adam: load_state_dict: missing key param_groups.0.beta1");

  // After all those failures opt's state is still exactly what it was.
  const StateDict now = opt.state_dict();
  REQUIRE(now.size() == good.size());
  for (const auto& [key, value] : good) {
    INFO(key);
    CHECK(now.at(key).to_vector<double>() == value.to_vector<double>());
  }
}
