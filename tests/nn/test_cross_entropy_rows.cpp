// cross_entropy's one-node common case (nn/cross_entropy.cpp, Note [Cross-entropy in row blocks]):
// values and gradients against the composition it replaces, -gather(log_softmax(x), t), over several
// blocks of rows in float64 and float32; 16-bit logits under autocast against the float32
// composition of their float32 copy; and what it buys: a GPT training step's peak memory in bfloat16
// against float32 (issue 39's target, 60 %). Its gradcheck and PyTorch's values: tests/nn/test_loss.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "minitrain.h"
#include "nn/nn.h"
#include "tensor/memory.h"
#include "tensor/parallel.h"
#include "tensor/storage.h"

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

namespace {

// The bytes a training step of `gpt` holds at its peak above what it started with: the activations
// saved for backward and the temporaries of forward and backward. The gradients already exist
// (zero_grad keeps them), so what they take is not counted, in either precision.
size_t step_peak_bytes(nn::GPT& gpt, const Tensor& idx, const Tensor& target, bool bf16) {
  gpt.zero_grad(/*set_to_none=*/false);
  const size_t start = tensor_memory(kCPU).in_use;
  reset_cpu_peak_memory();
  Tensor loss;
  {
    const AutocastGuard autocast(kBFloat16, {.enabled = bf16});  // as mini_train --precision bf16
    const Tensor logits = gpt.forward(idx);
    loss = nn::F::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
  }
  loss.backward();
  return tensor_memory(kCPU).peak - start;
}

}  // namespace

TEST_CASE("a GPT step's peak memory in bfloat16 is at most 60 % of float32's (issue 39)") {
  // mini_train --model gpt's shape and batch (4 layers, 4 heads, 128 wide, 64 positions, batch 32).
  // Counted bytes of tensors: deterministic, so the ratio is a property of what each op keeps. Two
  // intra-op threads, as README's figure: each bfloat16 GEMM's tile scratch (Note [Low-precision
  // GEMM in tiles]) is counted once per thread that runs its tiles.
  struct Threads {
    int before = get_num_threads();
    Threads() { set_num_threads(2); }
    ~Threads() { set_num_threads(before); }
  } threads;
  Generator gen(42);
  nn::GPT gpt({.vocab = 256, .context = 64, .dim = 128, .layers = 4, .heads = 4});
  const Tensor tokens = randint(0, 256, {32, 65}, gen);
  const Tensor idx = tokens.narrow(1, 0, 64).contiguous(), target = tokens.narrow(1, 1, 64).contiguous();
  for (bool bf16 : {false, true}) step_peak_bytes(gpt, idx, target, bf16);  // makes the gradients
  const double fp32 = static_cast<double>(step_peak_bytes(gpt, idx, target, false));
  const double bf16 = static_cast<double>(step_peak_bytes(gpt, idx, target, true));
  INFO("peak above the step's start: fp32 ", fp32 / 1048576.0, " MiB, bf16 ", bf16 / 1048576.0, " MiB");
  CHECK(bf16 <= 0.60 * fp32);
}
