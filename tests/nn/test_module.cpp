// Module: dotted names in registration order, tied weights, registration errors, train/eval,
// zero_grad, to() keeping parameter identity, and the printed tree.
#include <doctest/doctest.h>

#include <sstream>

#include "minitrain.h"
#include "nn/nn.h"

using namespace mt;

namespace {

std::vector<std::string> keys(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}

// A model shaped like real ones: its own parameter and buffer, a nested Sequential, a head.
struct Net : nn::Module {
  Net() {
    scale = register_parameter("scale", ones({1}));
    layers = register_module("layers", std::make_shared<nn::Sequential>(
        std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 8, nn::LinearOptions{.bias = false}))));
    head = register_module("head", std::make_shared<nn::Linear>(8, 2));
    steps = register_buffer("steps", zeros({}, {.dtype = kInt64}));
  }
  Tensor forward(const Tensor& x) override { return head->forward(layers->forward(x)) * scale; }

  Tensor scale, steps;
  std::shared_ptr<nn::Sequential> layers;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace

TEST_CASE("Module: dotted names in registration order, parents first") {
  Net net;
  CHECK(keys(net.named_parameters()) == std::vector<std::string>{"scale", "layers.0.weight", "layers.0.bias",
                                                                 "layers.2.0.weight", "head.weight", "head.bias"});
  CHECK(keys(net.named_parameters(/*recurse=*/false)) == std::vector<std::string>{"scale"});
  CHECK(keys(net.named_buffers()) == std::vector<std::string>{"steps"});
  // PyTorch's state_dict order: each module's parameters, then its buffers, then its children.
  CHECK(keys(net.state_dict()) == std::vector<std::string>{"scale", "steps", "layers.0.weight", "layers.0.bias",
                                                           "layers.2.0.weight", "head.weight", "head.bias"});
  REQUIRE(net.named_children().size() == 2);
  CHECK(net.named_children()[0].first == "layers");
  CHECK(net.children()[1] == net.head);

  // parameters() are the registered tensors themselves (what an optimizer needs), not copies.
  const std::vector<Tensor> params = net.parameters();
  REQUIRE(params.size() == 6);
  CHECK(params[4].is_same(net.head->weight));
  for (const Tensor& p : params) CHECK(p.requires_grad());
  CHECK_FALSE(net.steps.requires_grad());
}

TEST_CASE("Module: a tied weight is one parameter with two state-dict names") {
  auto shared = std::make_shared<nn::Linear>(3, 3);
  nn::Sequential seq{shared, std::make_shared<nn::Tanh>(), shared};
  CHECK(keys(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(keys(seq.state_dict()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
}

TEST_CASE("Module: registration errors name the module and the parameter") {
  nn::Linear lin(2, 3);
  CHECK_THROWS_WITH_AS(lin.register_parameter("weight", zeros({1})),
                       doctest::Contains("Linear.register_parameter: 'weight' is already registered"), Error);
  CHECK_THROWS_WITH_AS(lin.register_buffer("a.b", zeros({1})), doctest::Contains("must not contain '.'"), Error);
  CHECK_THROWS_WITH_AS(lin.register_module("", std::make_shared<nn::ReLU>()), doctest::Contains("must not be empty"),
                       Error);
  const Tensor computed = lin.weight * 2.0;
  CHECK_THROWS_WITH_AS(lin.register_parameter("doubled", computed), doctest::Contains("'doubled' was computed by"),
                       Error);
  CHECK_THROWS_WITH_AS(lin.register_parameter("index", zeros({2}, {.dtype = kInt64})),
                       doctest::Contains("must be floating-point"), Error);
  // Frozen parameters and integer buffers are fine.
  CHECK_FALSE(lin.register_parameter("frozen", zeros({2}), /*requires_grad=*/false).requires_grad());
}

TEST_CASE("Module: train() and eval() reach every descendant") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net.layers->is_training());
  CHECK_FALSE(net.layers->at<nn::Sequential>(2)->is_training());
  net.train();
  CHECK(net.layers->at<nn::Sequential>(2)->at<nn::Linear>(0)->is_training());
}

TEST_CASE("Module: zero_grad drops or zeroes every parameter's gradient") {
  Net net;
  Generator gen(1);
  net.forward(rand({5, 4}, gen)).sum().backward();
  for (const Tensor& p : net.parameters()) REQUIRE(p.grad().defined());

  const Tensor head_grad = net.head->weight.grad();
  net.zero_grad(/*set_to_none=*/false);
  CHECK(net.head->weight.grad().is_same(head_grad));  // the same tensor, now zero
  for (const Tensor& p : net.parameters()) CHECK(p.grad().abs().max().item() == 0.0);

  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("Module: to(dtype) converts under the existing handles (Note [Module::to keeps parameter identity])") {
  Net net;
  Generator gen(2);
  net.forward(rand({3, 4}, gen)).sum().backward();
  const std::vector<Tensor> before = net.parameters();  // what an optimizer would hold
  const std::vector<double> w = net.head->weight.to_vector<double>();

  net.to(kFloat64);
  const std::vector<Tensor> after = net.parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].is_same(before[i]));
    CHECK(before[i].dtype() == kFloat64);
    CHECK(before[i].requires_grad());
    CHECK(before[i].grad().dtype() == kFloat64);
  }
  CHECK(net.head->weight.to_vector<double>() == w);  // float -> double is exact
  CHECK(net.steps.dtype() == kInt64);                // integer buffers stay

  // Training goes on in float64, into the same .grad tensors' successors.
  net.zero_grad();
  net.forward(rand({3, 4}, gen, {.dtype = kFloat64})).sum().backward();
  CHECK(net.head->weight.grad().dtype() == kFloat64);
  CHECK_THROWS_WITH_AS(net.to(kInt64), doctest::Contains("must stay floating-point"), Error);
  net.to(kCPU);  // already there: nothing changes
  CHECK(net.head->weight.dtype() == kFloat64);
}

TEST_CASE("Module: prints its tree like PyTorch") {
  Net net;
  std::ostringstream os;
  os << net;
  CHECK(os.str() ==
        "Net(\n"
        "  (layers): Sequential(\n"
        "    (0): Linear(in_features=4, out_features=8, bias=true)\n"
        "    (1): ReLU()\n"
        "    (2): Sequential(\n"
        "      (0): Linear(in_features=8, out_features=8, bias=false)\n"
        "    )\n"
        "  )\n"
        "  (head): Linear(in_features=8, out_features=2, bias=true)\n"
        ")");
  std::ostringstream leaves;
  leaves << nn::Dropout(0.25) << ' ' << nn::GELU({.approximate = nn::GeluApproximate::Tanh}) << ' '
         << nn::CrossEntropyLoss({.reduction = nn::kSum}) << ' ' << nn::Flatten();
  CHECK(leaves.str() == "Dropout(p=0.25) GELU(approximate='tanh') CrossEntropyLoss(reduction=sum) "
                        "Flatten(start_dim=1, end_dim=-1)");
}

TEST_CASE("Module: calling a module without a one-input forward names it") {
  struct Bare : nn::Module {};
  Bare bare;
  CHECK_THROWS_WITH_AS(bare(zeros({1})), doctest::Contains("has no forward(const Tensor&)"), Error);
  nn::Sequential seq{std::make_shared<nn::MSELoss>()};
  CHECK_THROWS_WITH_AS(seq(zeros({1})), doctest::Contains("MSELoss has no forward(const Tensor&)"), Error);
}
