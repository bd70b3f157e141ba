// The engine's contract: dependency counting for reused nodes, accumulation across backwards,
// retain_graph, hooks after accumulation, callbacks after the last node, loud errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "minitrain.h"

using namespace mt;

namespace {
Tensor leaf(std::vector<double> v, Shape s) { return from_vector(v, s, {.dtype = kFloat64, .requires_grad = true}); }
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("a reused node receives the sum of its gradients before it runs") {
  // b = a + a; c = b * b  =>  c = 4a²,  dc/da = 8a
  Tensor a = leaf({3}, {});
  Tensor b = a + a;
  Tensor c = b * b;
  c.backward();
  CHECK(a.grad().item() == 24);
}

TEST_CASE("diamond graph: two paths from one leaf") {
  // y = exp(x) * sin-free path: y = x² + 3x  (two branches join) => dy/dx = 2x + 3
  Tensor x = leaf({2}, {});
  Tensor y = x * x + x * 3.0;
  y.backward();
  CHECK(x.grad().item() == 7);
}

TEST_CASE("gradients accumulate across backward calls until reset") {
  Tensor x = leaf({1, 2}, {2});
  (x * x).sum().backward();
  (x * x).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{4, 8});
  x.set_grad(Tensor());
  (x * 3.0).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{3, 3});
}

TEST_CASE("backward twice needs retain_graph") {
  Tensor x = leaf({2}, {});
  Tensor y = x.exp() * x;
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the first kept the saved tensors
  CHECK(x.grad().item() == doctest::Approx(2 * 3 * std::exp(2.0)));
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward through the graph a second time"), Error);
}

TEST_CASE("post-accumulate-grad hooks run once per backward, after accumulation, newest layer first") {
  // A two-layer chain: the gradient of w2 (used last in forward) is ready before w1's.
  Tensor w1 = leaf({2}, {}), w2 = leaf({3}, {});
  std::vector<std::string> order;
  w1.register_post_accumulate_grad_hook([&](const Tensor& p) { order.push_back("w1=" + std::to_string(p.grad().item())); });
  w2.register_post_accumulate_grad_hook([&](const Tensor& p) { order.push_back("w2=" + std::to_string(p.grad().item())); });
  Tensor x = from_vector(std::vector<double>{5}, {}, {.dtype = kFloat64});
  Tensor loss = (x * w1) * w2;  // d/dw1 = x·w2 = 15, d/dw2 = x·w1 = 10
  loss.backward();
  REQUIRE(order.size() == 2);
  CHECK(order[0] == "w2=" + std::to_string(10.0));
  CHECK(order[1] == "w1=" + std::to_string(15.0));
  // A leaf used twice still gets one hook call per backward, with the summed gradient.
  order.clear();
  Tensor twice = w1 * w1;
  twice.backward();
  CHECK(order == std::vector<std::string>{"w1=" + std::to_string(15.0 + 4.0)});
}

TEST_CASE("callbacks queued during backward run after the last node") {
  Tensor w = leaf({1}, {});
  std::vector<std::string> events;
  w.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("hook");
    Engine::queue_callback([&] { events.push_back("callback"); });
  });
  CHECK_FALSE(Engine::in_backward());
  (w * 2.0).backward();
  CHECK(events == std::vector<std::string>{"hook", "callback"});
  CHECK_THROWS_WITH_AS(Engine::queue_callback([] {}), doctest::Contains("no backward is running"), Error);
}

TEST_CASE("in-place change of a saved tensor is detected") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = from_vector(std::vector<double>{3, 4}, {2});
  Tensor y = (x * c).sum();
  c.add_(1.0);  // c was saved by mul for x's gradient
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("modified by an in-place operation"), Error);
  CHECK_THROWS_WITH_AS(x.add_(1.0), doctest::Contains("in-place change of a tensor that requires grad"), Error);
  NoGradGuard guard;
  x.add_(1.0);  // allowed under no-grad (what optimizers do)
  CHECK(vals(x) == std::vector<double>{2, 3});
}

TEST_CASE("a graph that is never run is freed with its last handle") {
  // Note [What a saved tensor holds]: exp, softmax and attention save their own results, mul and
  // linear their inputs (leaves and an earlier op's result). A saved result that held its own
  // history would be a cycle, and the nodes would outlive every handle.
  Tensor x = from_vector(std::vector<double>{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, {1, 1, 2, 3},
                         {.dtype = kFloat64, .requires_grad = true});
  Tensor w = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = kFloat64, .requires_grad = true});
  std::vector<std::weak_ptr<Node>> nodes;
  {
    Tensor e = exp(x);
    Tensor s = softmax(e * x, -1);
    Tensor a = scaled_dot_product_attention(s, x, e, {.causal = true});
    Tensor y = linear(a, w, Tensor());
    for (const Tensor* t : {&e, &s, &a, &y}) nodes.push_back(t->grad_fn());
    for (const auto& n : nodes) CHECK(!n.expired());
  }
  for (const auto& n : nodes) CHECK(n.expired());
  // The same graph, run: the gradient reaches both leaves.
  Tensor e = exp(x);
  linear(scaled_dot_product_attention(softmax(e * x, -1), x, e, {.causal = true}), w, Tensor()).sum().backward();
  CHECK(x.grad().defined());
  CHECK(w.grad().defined());
}

TEST_CASE("no-grad mode records nothing, and detach cuts history") {
  Tensor x = leaf({1}, {});
  {
    NoGradGuard guard;
    CHECK_FALSE((x * 2.0).requires_grad());
  }
  CHECK((x * 2.0).requires_grad());
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK_THROWS_WITH_AS(d.sum().backward(), doctest::Contains("does not require grad"), Error);
}

TEST_CASE("errors: non-scalar root, integer leaves, non-leaf requires_grad_") {
  Tensor x = leaf({1, 2}, {2});
  CHECK_THROWS_WITH_AS((x * 2.0).backward(), doctest::Contains("implied only for a one-element output"), Error);
  CHECK_THROWS_WITH_AS(arange(3).requires_grad_(), doctest::Contains("only floating-point tensors"), Error);
  CHECK_THROWS_WITH_AS((x * 2.0).requires_grad_(false), doctest::Contains("only leaf tensors"), Error);
  // An explicit gradient for a non-scalar root works.
  (x * 2.0).backward(from_vector(std::vector<double>{1, 10}, {2}, {.dtype = kFloat64}));
  CHECK(vals(x.grad()) == std::vector<double>{2, 20});
}

TEST_CASE("only the inputs that need grad get one") {
  Tensor a = leaf({2}, {});
  Tensor b = from_vector(std::vector<double>{3}, {}, {.dtype = kFloat64});
  (a * b).backward();
  CHECK(a.grad().item() == 3);
  CHECK_FALSE(b.grad().defined());
}
