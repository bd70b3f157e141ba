// The module tree as PyTorch users walk it: ModuleList and ModuleDict register their elements, so
// names, counts and state-dict keys match what PyTorch gives the same tree (tests/nn/fixtures/
// module_names.txt, written by tests/nn/make_module_names.py); named_modules, apply, and forward
// pre-hooks and hooks with handles that remove them.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "minitrain.h"

using namespace mt;

namespace {

// The tree of tests/nn/make_module_names.py.
struct Net : nn::Module {
  Net() {
    stem = register_module("stem", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8),
                                                                    std::make_shared<nn::ReLU>()));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 2; ++i)
      blocks->push_back(std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 8),
                                                         std::make_shared<nn::LayerNorm>(8)));
    norm = register_module("norm", std::make_shared<nn::BatchNorm1d>(8));
    heads = register_module("heads", std::make_shared<nn::ModuleDict>(nn::NamedModules{
                                         {"cls", std::make_shared<nn::Linear>(8, 3)},
                                         {"reg", std::make_shared<nn::Linear>(8, 1, nn::LinearOptions{.bias = false})}}));
    register_module("tied", (*heads)["cls"]);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*stem)(x);
    for (const auto& block : *blocks) h = (*block)(h);
    return (*(*heads)["cls"])((*norm)(h));
  }
  std::shared_ptr<nn::Sequential> stem;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::BatchNorm1d> norm;
  std::shared_ptr<nn::ModuleDict> heads;
};

std::map<std::string, std::vector<std::string>> torch_names() {
  std::ifstream in(std::string(MT_TEST_FIXTURES) + "/module_names.txt");
  REQUIRE(in.good());
  std::map<std::string, std::vector<std::string>> lists;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key, word;
    words >> key;
    while (words >> word) lists[key].push_back(word == "<self>" ? "" : word);
  }
  return lists;
}

template <typename Named>
std::vector<std::string> names(const Named& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}

}  // namespace

TEST_CASE("ModuleList and ModuleDict children get PyTorch's names, counts and state-dict keys") {
  auto torch = torch_names();
  Net net;
  CHECK(names(net.named_parameters()) == torch["named_parameters"]);
  CHECK(names(net.named_buffers()) == torch["named_buffers"]);
  CHECK(names(net.state_dict()) == torch["state_dict"]);
  CHECK(names(net.named_modules()) == torch["named_modules"]);
  int64_t count = 0;
  for (const Tensor& p : net.parameters()) count += p.numel();
  CHECK(std::to_string(count) == torch["parameter_count"].at(0));

  // The state dict loads into a fresh tree, and to() reaches the containers' elements.
  Net other;
  other.load_state_dict(net.state_dict());
  CHECK(other.blocks->at<nn::Sequential>(1)->at<nn::Linear>(0)->weight.to_vector<float>() ==
        net.blocks->at<nn::Sequential>(1)->at<nn::Linear>(0)->weight.to_vector<float>());
  other.to(kFloat64);
  CHECK(other.heads->at<nn::Linear>("reg")->weight.dtype() == kFloat64);
  CHECK(other.forward(ones({2, 4}, {.dtype = kFloat64})).sizes() == Shape{2, 3});
}

TEST_CASE("ModuleList and ModuleDict: access, iteration and errors") {
  nn::ModuleList list{std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2, 2)};
  list.extend({std::make_shared<nn::Tanh>()});
  CHECK(list.size() == 3);
  CHECK(names(list.named_children()) == std::vector<std::string>{"0", "1", "2"});
  CHECK(list.at<nn::Linear>(1)->in_features == 2);
  int visited = 0;
  for (const auto& m : list) visited += m != nullptr;
  CHECK(visited == 3);
  CHECK_THROWS_WITH_AS(list[3], doctest::Contains("ModuleList: index 3 is out of range for 3 modules"), Error);
  CHECK_THROWS_WITH_AS(list.at<nn::Linear>(0), doctest::Contains("module 0 is a ReLU, not the type asked for"), Error);
  CHECK_THROWS_WITH_AS(list(ones({1, 2})), doctest::Contains("ModuleList has no forward"), Error);

  nn::ModuleDict dict;
  dict.insert("b", std::make_shared<nn::ReLU>());
  auto lin = dict.insert("a", std::make_shared<nn::Linear>(2, 1));  // typed
  CHECK(lin->out_features == 1);
  CHECK(dict.keys() == std::vector<std::string>{"b", "a"});  // insertion order, not sorted
  CHECK(dict.contains("a"));
  CHECK(!dict.contains("c"));
  CHECK(names(dict.named_parameters()) == std::vector<std::string>{"a.weight", "a.bias"});
  CHECK_THROWS_WITH_AS(dict["c"], doctest::Contains("ModuleDict: no module under key 'c' (keys: b, a)"), Error);
  CHECK_THROWS_WITH_AS(dict.insert("a", std::make_shared<nn::ReLU>()), doctest::Contains("'a' is already registered"),
                       Error);
  CHECK_THROWS_WITH_AS(dict.insert("x.y", std::make_shared<nn::ReLU>()), doctest::Contains("must not contain '.'"),
                       Error);
}

TEST_CASE("named_modules lists the module itself first, owning it only when a shared_ptr does") {
  auto net = std::make_shared<Net>();
  const long before = net.use_count();
  {
    const nn::NamedModules all = net->named_modules();
    CHECK(all.front().second.get() == net.get());
    CHECK(net.use_count() == before + 1);  // shares ownership
    CHECK(net->modules().size() == all.size());
  }
  Net on_stack;
  const nn::NamedModules all = on_stack.named_modules();
  CHECK(all.front().second.get() == &on_stack);
  CHECK(all.front().second.use_count() == 0);  // points at it, owns nothing
}

TEST_CASE("apply visits every module, children before their parent, as PyTorch's apply") {
  nn::Sequential net{std::make_shared<nn::Linear>(3, 2),
                     std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2, 2))};
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) {
    order.push_back(m.name());
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard no_grad;
      linear->weight.fill_(0.5);
      linear->bias.zero_();
    }
  });
  CHECK(order == std::vector<std::string>{"Linear", "ReLU", "Linear", "Sequential", "Sequential"});
  CHECK(net(ones({1, 3})).to_vector<float>() == std::vector<float>{1.5f, 1.5f});  // 0.5·(0.5·3)·2
}

TEST_CASE("forward pre-hooks and hooks run around forward when a module is called") {
  auto fc = std::make_shared<nn::Linear>(2, 1);
  {
    NoGradGuard no_grad;
    fc->weight.fill_(1.0);
    fc->bias.zero_();
  }
  nn::Sequential net{fc, std::make_shared<nn::ReLU>()};
  const Tensor x = from_vector(std::vector<float>{1, 2}, {1, 2});
  std::vector<std::string> calls;
  // The pre-hook doubles the input; the first forward hook sees that input and records the output;
  // the second replaces the output with its negation.
  nn::HookHandle pre = fc->register_forward_pre_hook([&](nn::Module&, const Tensor& in) -> std::optional<Tensor> {
    calls.push_back("pre");
    return in * 2.0;
  });
  nn::HookHandle seen = fc->register_forward_hook([&](nn::Module& m, const Tensor& in, const Tensor& out) {
    calls.push_back(m.name() + " " + std::to_string(in.to_vector<float>()[1]) + " -> " +
                    std::to_string(out.to_vector<float>()[0]));
    return std::nullopt;
  });
  nn::HookHandle negate = fc->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> { return -out; });
  CHECK(net(x).to_vector<float>() == std::vector<float>{0});  // relu(-(2 + 4))
  CHECK(calls == std::vector<std::string>{"pre", "Linear 4.000000 -> 6.000000"});
  CHECK(fc->forward(x).to_vector<float>() == std::vector<float>{3});  // forward itself runs no hooks

  negate.remove();
  negate.remove();  // twice is harmless
  pre.remove();
  CHECK(net(x).to_vector<float>() == std::vector<float>{3});
  seen.remove();
  calls.clear();
  CHECK(net(x).to_vector<float>() == std::vector<float>{3});
  CHECK(calls.empty());

  // A hook may remove itself while it runs; a handle outliving its module is harmless.
  nn::HookHandle once;
  once = fc->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    once.remove();
    calls.push_back("once");
    return std::nullopt;
  });
  net(x);
  net(x);
  CHECK(calls == std::vector<std::string>{"once"});
  nn::HookHandle dangling;
  {
    nn::ReLU relu;
    dangling = relu.register_forward_pre_hook([](nn::Module&, const Tensor&) { return std::nullopt; });
  }
  dangling.remove();
}
