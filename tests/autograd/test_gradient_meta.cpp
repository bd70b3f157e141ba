// Note [A gradient matches its tensor]: the engine rejects a gradient whose shape, dtype or device
// differs from the tensor it is the gradient of, and names the node whose backward made it. The
// wrong backwards here are deliberate: small custom nodes recorded the way every op records itself
// (autograd/record.h), one per kind of mistake.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/record.h"
#include "minitrain.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

Tensor leaf(std::vector<double> v, Shape s) { return from_vector(v, s, {.dtype = kFloat64, .requires_grad = true}); }

// y = x, but the backward returns dy with a leading 1 added: (3) becomes [1, 3]. Broadcasting
// would let that pass through a sum of gradients unnoticed.
struct UnsqueezingBackward final : Node {
  TensorList apply(TensorList&& g) override { return {raw::unsqueeze(g[0], 0)}; }
  std::string name() const override { return "UnsqueezingBackward"; }
};

// y = x, but the backward returns dy in float32 whatever x is.
struct Float32Backward final : Node {
  TensorList apply(TensorList&& g) override { return {raw::cast(g[0], kFloat32)}; }
  std::string name() const override { return "Float32Backward"; }
};

// The message of the mt::Error that fn throws ("" if none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Records y = x with NodeT as its backward.
template <typename NodeT>
Tensor identity_with(const Tensor& x) {
  Tensor y = raw::clone(x);
  if (auto node = detail::record<NodeT>({&x})) detail::set_history(y, node);
  return y;
}

}  // namespace

TEST_CASE("a gradient of the wrong shape is an error naming the node that made it") {
  // z = sum(y·y) + sum(f(y)), y = 2x: y's slot gets 2y (3) from MulBackward and [1, 3] from f.
  // Summed with broadcasting that is [1, 3], which MulScalar's backward passes on to x's
  // AccumulateGrad, which would be the first to complain, naming itself.
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  Tensor z = (y * y).sum() + identity_with<UnsqueezingBackward>(y).sum();
  const std::string error = error_of([&] { z.backward(); });
  CHECK(error.find("UnsqueezingBackward returned a gradient of shape [1, 3], float64 on cpu for its input 0, "
                   "a tensor of shape [3], float64 on cpu") != std::string::npos);
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a gradient of the wrong dtype is an error naming the node, even where a sum would hide it") {
  // y's slot sums float64 from MulBackward with float32 from f: without the check the sum is
  // promoted to float64 and x.grad comes out right-looking (but computed partly in float32).
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  Tensor z = (y * y).sum() + identity_with<Float32Backward>(y).sum();
  const std::string error = error_of([&] { z.backward(); });
  CHECK(error.find("Float32Backward returned a gradient of shape [3], float32 on cpu for its input 0, "
                   "a tensor of shape [3], float64 on cpu") != std::string::npos);
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("the gradient passed to backward must match its root in shape and dtype") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 3.0;
  CHECK_THROWS_WITH_AS(y.backward(ones({2}, {.dtype = kFloat32})), doctest::Contains("for root 0 of shape [2], float64"),
                       Error);
  CHECK_THROWS_WITH_AS(y.backward(ones({1, 2}, {.dtype = kFloat64})), doctest::Contains("must match the root"), Error);
  y.backward(ones({2}, {.dtype = kFloat64}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("the ops' own backwards undo broadcasting and promotion, so their gradients pass the check") {
  // Broadcast (2, 1) against (3), promote float32 against float64, and reuse a tensor.
  Tensor a = from_vector(std::vector<float>{1, 2}, {2, 1}, {.requires_grad = true});
  Tensor b = leaf({1, 2, 3}, {3});
  Tensor y = a * b + a / b + a.to(kFloat64) * a.to(kFloat64);
  y.sum().backward();
  CHECK(a.grad().sizes() == Shape{2, 1});
  CHECK(a.grad().dtype() == kFloat32);
  CHECK(b.grad().sizes() == Shape{3});
  CHECK(b.grad().dtype() == kFloat64);
}

TEST_CASE("Module::to gives a parameter a new AccumulateGrad, and a graph recorded before it fails clearly") {
  nn::Linear model(2, 1);
  const Tensor x32 = ones({4, 2});
  const Tensor before = model.forward(x32).sum();  // holds the float32 AccumulateGrad nodes
  model.to(kFloat64);
  // A graph recorded after to() expects float64 gradients, though the old graph is still alive.
  model.forward(ones({4, 2}, {.dtype = kFloat64})).sum().backward();
  CHECK(model.weight.grad().dtype() == kFloat64);
  CHECK(model.weight.grad().to_vector<double>() == std::vector<double>{4, 4});
  CHECK_THROWS_WITH_AS(before.backward(), doctest::Contains("run the forward again after Module::to"), Error);
}
