// Autocast against PyTorch 1.13's CPU autocast (torch.autocast("cpu", dtype=torch.bfloat16)) on a tiny
// GPT and a small CNN: tests/nn/fixtures/autocast.safetensors, written by
// tests/nn/make_autocast_fixtures.py. Op by op, each op gets PyTorch's input and must give its output in
// the dtype PyTorch's autocast chose (the fixture tensor's own dtype), except where Note [Autocast op
// lists] says minitrain runs an op in float32 and PyTorch 1.13's CPU does not; then the model's
// logits, loss and every parameter's float32 gradient. Float16 has no PyTorch CPU reference in 1.13:
// its invariants are checked against minitrain's own float32 run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "minitrain.h"
#include "nn/nn.h"
#include "tests/nn/torch_fixtures.h"

using namespace mt;

namespace {

const test::TorchFixtures fx("autocast.safetensors");

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// |got - want| <= rtol·|want| + atol·max|want| elementwise; at most five elements reported.
void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  INFO(what);
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = values(got), w = values(want);
  const double scale = max_abs(w);
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    if (std::abs(g[i] - w[i]) <= rtol * std::abs(w[i]) + atol * scale) continue;
    ++bad;
    FAIL_CHECK("element " << i << ": minitrain " << g[i] << ", PyTorch " << w[i]);
  }
}

// The ops minitrain runs in float32 where PyTorch 1.13's CPU autocast gives bfloat16 (Note [Autocast
// op lists]): batch norm, and what follows it in the same dtype (ReLU, max pooling).
const std::set<std::string> kFloat32Here = {"1.bn", "1.pool", "5.bn", "5.pool"};
// Where PyTorch rounds to bfloat16 more often than minitrain: its attention is composed and rounds
// the scores, the probabilities and the output; minitrain's keeps them in float32 and rounds once.
const std::set<std::string> kRoundsMore = {"attn"};

// One op's output against PyTorch's: dtype (PyTorch's, or float32 where listed above) and values
// within bfloat16's rounding: relative 1e-2, plus 1e-2 of the largest value where the two round a
// different number of times (above), else 1e-3 of it.
void check_op(const std::string& model, const std::string& op, const Tensor& got) {
  const Tensor want = fx(model + ".op." + op);
  const bool float32_here = kFloat32Here.count(op) > 0;
  INFO(model, " op ", op);
  CHECK(got.dtype() == (float32_here ? kFloat32 : want.dtype()));
  check_close(got, want, 1e-2, float32_here || kRoundsMore.count(op) ? 1e-2 : 1e-3, model + " op " + op);
}

// Gradients through a whole model: within 1e-2 of PyTorch's autocast gradient's largest element, plus
// twice PyTorch's own bfloat16 error (its autocast gradient against its float32 one) in that tensor.
void check_grads(nn::Module& m, const std::string& model) {
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(model, " grad of ", name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kFloat32);
    const Tensor want = fx(model + ".grad." + name), want32 = fx(model + ".grad." + name + ".f32");
    const std::vector<double> w = values(want), w32 = values(want32), g = values(p.grad());
    double own = 0, err = 0;
    for (size_t i = 0; i < w.size(); ++i) own = std::max(own, std::abs(w[i] - w32[i]));
    for (size_t i = 0; i < w.size(); ++i) err = std::max(err, std::abs(g[i] - w[i]));
    CHECK(err <= 1e-2 * max_abs(w) + 2 * own);
  }
}

void load(nn::Module& m, const std::string& model) {
  NoGradGuard no_grad;
  for (auto [name, p] : m.named_parameters()) p.copy_(fx(model + ".param." + name));
}

Tensor param(const std::string& model, const std::string& name) {
  return fx(model + ".param." + name).clone().requires_grad_();
}

constexpr int64_t kB = 2, kT = 8, kC = 16, kH = 2, kV = 64;

std::shared_ptr<nn::GPT> fixture_gpt() {
  auto gpt = std::make_shared<nn::GPT>(nn::GPTOptions{.vocab = kV, .context = kT, .dim = kC, .layers = 2, .heads = kH});
  load(*gpt, "gpt");
  return gpt;
}

// (B, T, 3C) -> causal attention -> (B, T, C), as nn::MultiheadAttention does it.
Tensor attention(const Tensor& qkv) {
  std::vector<Tensor> parts = split(qkv, kC, 2);
  for (Tensor& t : parts) t = t.view({kB, kT, kH, kC / kH}).transpose(1, 2);
  const Tensor y = scaled_dot_product_attention(parts[0], parts[1], parts[2], {.causal = true});
  return y.transpose(1, 2).reshape({kB, kT, kC});
}

std::shared_ptr<nn::Sequential> small_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  for (auto [in, out] : {std::pair<int64_t, int64_t>{1, 4}, {4, 8}}) {
    net->push_back(std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dLayerOptions{.padding = 1}));
    net->push_back(std::make_shared<nn::BatchNorm2d>(out));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(2));
  }
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(8 * 2 * 2, 16));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(16, 10));
  load(*net, "cnn");
  return net;
}

}  // namespace

TEST_CASE("autocast, GPT block op by op: each op's dtype and values are PyTorch's on PyTorch's input") {
  auto op = [](const std::string& name) { return fx("gpt.op." + name); };
  auto p = [](const std::string& name) { return param("gpt", name); };
  const std::string b = "blocks.0.";
  AutocastGuard guard(kBFloat16);
  check_op("gpt", "ln1", layer_norm(op("emb"), p(b + "ln1.weight"), p(b + "ln1.bias")));
  check_op("gpt", "qkv", linear(op("ln1"), p(b + "attn.qkv.weight"), p(b + "attn.qkv.bias")));
  check_op("gpt", "attn", attention(op("qkv")));
  check_op("gpt", "proj", linear(op("attn"), p(b + "attn.proj.weight"), p(b + "attn.proj.bias")));
  check_op("gpt", "res1", op("emb") + op("proj"));
  check_op("gpt", "ln2", layer_norm(op("res1"), p(b + "ln2.weight"), p(b + "ln2.bias")));
  check_op("gpt", "fc1", linear(op("ln2"), p(b + "fc1.weight"), p(b + "fc1.bias")));
  check_op("gpt", "gelu", gelu(op("fc1")));
  check_op("gpt", "fc2", linear(op("gelu"), p(b + "fc2.weight"), p(b + "fc2.bias")));
  check_op("gpt", "res2", op("res1") + op("fc2"));
  check_op("gpt", "head", linear(op("ln_f"), p("tok_emb.weight")));
}

TEST_CASE("autocast, GPT: logits, loss and every parameter's float32 gradient against PyTorch's") {
  auto gpt = fixture_gpt();
  Tensor logits, loss;
  {
    AutocastGuard guard(kBFloat16);
    logits = gpt->forward(fx("gpt.idx"));
    loss = nn::functional::cross_entropy(logits.reshape({-1, kV}), fx("gpt.targets").reshape({-1}));
  }
  CHECK(logits.dtype() == kBFloat16);
  CHECK(loss.dtype() == kFloat32);
  check_close(logits, fx("gpt.logits"), 2e-2, 2e-2, "logits");
  CHECK(loss.item() == doctest::Approx(fx("gpt.loss").item()).epsilon(1e-2));
  loss.backward();
  check_grads(*gpt, "gpt");
  for (const auto& [name, t] : gpt->named_parameters()) CHECK(t.dtype() == kFloat32);
}

TEST_CASE("autocast, small CNN op by op, then its loss and gradients against PyTorch's") {
  auto op = [](const std::string& name) { return fx("cnn.op." + name); };
  auto p = [](const std::string& name) { return param("cnn", name); };
  {
    AutocastGuard guard(kBFloat16);
    const Pool2dOptions pool{.kernel_size = 2};
    check_op("cnn", "0.conv", conv2d(fx("cnn.x"), p("0.weight"), p("0.bias"), {.padding = 1}));
    check_op("cnn", "1.bn", batch_norm_train(op("0.conv"), p("1.weight"), p("1.bias"), 1e-5));
    // After a batch norm, minitrain's ReLU and pooling read its float32 output.
    check_op("cnn", "1.pool", max_pool2d(relu(op("1.bn").to(kFloat32)), pool));
    check_op("cnn", "4.conv", conv2d(op("1.pool"), p("4.weight"), p("4.bias"), {.padding = 1}));
    check_op("cnn", "5.bn", batch_norm_train(op("4.conv"), p("5.weight"), p("5.bias"), 1e-5));
    check_op("cnn", "5.pool", max_pool2d(relu(op("5.bn").to(kFloat32)), pool));
    check_op("cnn", "9.fc", linear(op("5.pool").flatten(1), p("9.weight"), p("9.bias")));
    check_op("cnn", "11.fc", linear(relu(op("9.fc")), p("11.weight"), p("11.bias")));
  }
  auto net = small_cnn();
  Tensor logits, loss;
  {
    AutocastGuard guard(kBFloat16);
    logits = net->forward(fx("cnn.x"));
    loss = nn::functional::cross_entropy(logits, fx("cnn.labels"));
  }
  CHECK(logits.dtype() == kBFloat16);
  check_close(logits, fx("cnn.logits"), 2e-2, 2e-2, "logits");
  CHECK(loss.item() == doctest::Approx(fx("cnn.loss").item()).epsilon(1e-2));
  loss.backward();
  check_grads(*net, "cnn");
}

TEST_CASE("autocast in float16, GPT: each op's dtype, float32 gradients, values within float16 rounding of float32's") {
  // PyTorch 1.13's CPU autocast has no float16, so the reference is minitrain's own float32 run.
  auto gpt16 = fixture_gpt(), gpt32 = fixture_gpt();
  const Tensor idx = fx("gpt.idx"), targets = fx("gpt.targets").reshape({-1});
  Tensor logits16, loss16;
  {
    AutocastGuard guard(kFloat16);
    logits16 = gpt16->forward(idx);
    loss16 = nn::functional::cross_entropy(logits16.reshape({-1, kV}), targets);
    // The dtypes op by op: linear and attention in float16, the norms and the loss in float32.
    const Tensor x = fx("gpt.op.ln1");
    CHECK(linear(x, param("gpt", "blocks.0.fc1.weight")).dtype() == kFloat16);
    CHECK(gelu(linear(x, param("gpt", "blocks.0.fc1.weight"))).dtype() == kFloat16);
    CHECK(layer_norm(x.to(kFloat16), Tensor(), Tensor()).dtype() == kFloat32);
    CHECK(softmax(x.to(kFloat16), -1).dtype() == kFloat32);
    CHECK(attention(linear(x, param("gpt", "blocks.0.attn.qkv.weight"))).dtype() == kFloat16);
  }
  const Tensor logits32 = gpt32->forward(idx);
  const Tensor loss32 = nn::functional::cross_entropy(logits32.reshape({-1, kV}), targets);
  CHECK(logits16.dtype() == kFloat16);
  CHECK(loss16.dtype() == kFloat32);
  // float16 keeps 11 bits: 2^-11 relative per rounding, a few roundings deep.
  check_close(logits16, logits32, 1e-2, 5e-3, "float16 logits");
  CHECK(loss16.item() == doctest::Approx(loss32.item()).epsilon(5e-3));
  loss16.backward();
  loss32.backward();
  const auto p16 = gpt16->named_parameters(), p32 = gpt32->named_parameters();
  for (size_t i = 0; i < p16.size(); ++i) {
    INFO("grad of ", p16[i].first);
    CHECK(p16[i].second.dtype() == kFloat32);
    REQUIRE(p16[i].second.grad().defined());
    CHECK(p16[i].second.grad().dtype() == kFloat32);
    const std::vector<double> g = values(p16[i].second.grad()), w = values(p32[i].second.grad());
    double err = 0;
    for (size_t j = 0; j < g.size(); ++j) err = std::max(err, std::abs(g[j] - w[j]));
    CHECK(err <= 2e-2 * max_abs(w));
  }
}
