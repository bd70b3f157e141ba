// cross_entropy's one-node common case (nn/cross_entropy.cpp, Note [Cross-entropy in row blocks]):
// values and gradients against the composition it replaces, -gather(log_softmax(x), t), over several
// blocks of rows in float64 and float32; 16-bit logits under autocast against the float32
// composition of their float32 copy. Its gradcheck and PyTorch's values: tests/nn/test_loss.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "minitrain.h"
#include "nn/nn.h"

using namespace mt;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

// The composition the node replaces, reduced as cross_entropy reduces.
Tensor composed(const Tensor& x, const Tensor& t, nn::Reduction r) {
  const Tensor losses = -view(gather(log_softmax(x, 1), 1, t.unsqueeze(1)), {x.size(0)});
  return r == nn::kMean ? mean(losses) : r == nn::kSum ? sum(losses) : losses;
}

// The first node named `name` down the first inputs from t's grad_fn, or null.
const Node* find_node(const Tensor& t, const std::string& name) {
  const Node* n = t.grad_fn().get();
  while (n != nullptr && n->name() != name) n = n->next_edges.empty() ? nullptr : n->next_edges[0].fn.get();
  return n;
}

// |a - b| <= tol·(1 + |b|), element by element.
void check_near(const Tensor& a, const Tensor& b, double tol, const char* what) {
  const std::vector<double> va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  size_t bad = 0;
  for (size_t i = 0; i < va.size(); ++i) bad += std::abs(va[i] - vb[i]) > tol * (1.0 + std::abs(vb[i]));
  INFO(what);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cross_entropy's node equals the composition over several blocks of rows, in float64 and float32") {
  // 1000 classes: 65 rows a block, so 200 rows are three whole blocks and a part.
  Generator gen(39);
  const Tensor t = randint(0, 1000, {200}, gen);
  for (DType dt : {kFloat64, kFloat32}) {
    const double tol = dt == kFloat64 ? 1e-13 : 2e-6;
    const Tensor base = randn({200, 1000}, gen, {.dtype = dt}) * 3.0;
    const Tensor gy = randn({200}, gen, {.dtype = dt});
    for (nn::Reduction r : {nn::kMean, nn::kSum, nn::kNone}) {
      CAPTURE(nn::reduction_name(r));
      const Tensor x = base.detach().requires_grad_(), x_ref = base.detach().requires_grad_();
      const Tensor loss = nn::F::cross_entropy(x, t, {.reduction = r});
      const Tensor ref = composed(x_ref, t, r);
      CHECK(find_node(loss, "CrossEntropyRowsBackward") != nullptr);  // the node, not the composition
      check_near(loss, ref, tol, "loss");
      (r == nn::kNone ? sum(loss * gy) : loss).backward();
      (r == nn::kNone ? sum(ref * gy) : ref).backward();
      check_near(x.grad(), x_ref.grad(), tol, "dx");
    }
  }
}

TEST_CASE("cross_entropy under autocast takes 16-bit logits as they are and computes float32's loss and gradient") {
  Generator gen(40);
  const Tensor t = randint(0, 700, {300}, gen);
  for (DType dt : {kBFloat16, kFloat16}) {
    CAPTURE(dt);
    const Tensor x = (randn({300, 700}, gen) * 4.0).to(dt).requires_grad_();
    const Tensor x32 = x.detach().to(kFloat32).requires_grad_();
    Tensor loss;
    {
      AutocastGuard guard(dt);
      loss = nn::F::cross_entropy(x, t);
    }
    CHECK(loss.dtype() == kFloat32);
    // No float32 copy of the logits in the graph: the loss's node reads them itself.
    const Node* node = find_node(loss, "CrossEntropyRowsBackward");
    REQUIRE(node != nullptr);
    CHECK(node->next_edges[0].fn->name() == "AccumulateGrad");
    const Tensor ref = composed(x32, t, nn::kMean);
    CHECK(values(loss) == values(ref));  // the same float32 arithmetic on the same values
    loss.backward();
    ref.backward();
    REQUIRE(x.grad().dtype() == dt);
    // Rounded once from float32's gradient: within half an ulp of the dtype (2⁻⁸ of the value for
    // bfloat16, 2⁻¹¹ for float16, and half float16's subnormal step 2⁻²⁴ below its normal range),
    // and a little more for float32 sums taken in another order.
    const double half_ulp = dt == kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const double floor = dt == kBFloat16 ? 0.0 : std::ldexp(1.0, -25);
    const std::vector<double> g = values(x.grad()), g32 = values(x32.grad());
    size_t bad = 0;
    for (size_t i = 0; i < g.size(); ++i) bad += std::abs(g[i] - g32[i]) > 1.01 * (half_ulp * std::abs(g32[i]) + floor);
    CHECK(bad == 0);
  }
}

TEST_CASE("cross_entropy without autocast keeps 16-bit logits' dtype for the loss, rounded once from float32") {
  Generator gen(41);
  const Tensor t = randint(0, 50, {40}, gen);
  const Tensor x32 = randn({40, 50}, gen) * 2.0;
  const Tensor x = x32.to(kBFloat16);
  const Tensor loss = nn::F::cross_entropy(x, t);
  CHECK(loss.dtype() == kBFloat16);
  const double ref = composed(x.to(kFloat32), t, nn::kMean).item();
  CHECK(std::abs(loss.item() - ref) <= std::ldexp(1.0, -8) * std::abs(ref));  // half an ulp
}
