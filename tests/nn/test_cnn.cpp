// The CNN layers against PyTorch: Conv2d, the pooling layers, BatchNorm1d/2d (outputs, gradients,
// running statistics over training steps, eval mode) and a small conv-BN-ReLU-pool-Linear model
// loaded from PyTorch's state dict. The reference values are in tests/nn/fixtures/, written by
// tests/nn/make_cnn_fixtures.py with PyTorch 1.13 (float32). Also: PyTorch's initial bounds, the
// buffers, and the errors for bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "minitrain.h"
#include "nn/nn.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

class Fixture {
 public:
  explicit Fixture(const std::string& file) {
    for (auto& [name, t] : load_safetensors(std::string(MT_TEST_FIXTURES) + "/" + file).tensors) tensors_[name] = t;
  }
  Tensor operator[](const std::string& name) const {
    const auto it = tensors_.find(name);
    REQUIRE_MESSAGE(it != tensors_.end(), "fixture has no tensor ", name);
    return it->second;
  }

 private:
  std::map<std::string, Tensor> tensors_;
};

// |got - want| <= atol + rtol·|want| elementwise, float32 accuracy.
void check_close(const Tensor& got, const Tensor& want, double atol = 2e-5, double rtol = 1e-4) {
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]));
  }
}

void set(const Tensor& param, const Tensor& value) {
  NoGradGuard no_grad;
  Tensor(param).copy_(value);
}

}  // namespace

TEST_CASE("Conv2d equals PyTorch's over stride, padding, dilation and groups, forward and backward") {
  const Fixture f("conv2d.safetensors");
  struct Case {
    const char* name;
    int64_t in, out;
    Size2 kernel;
    nn::Conv2dLayerOptions options;
  };
  const Case cases[] = {
      {"plain", 2, 3, 3, {}},
      {"strided", 3, 4, {3, 2}, {.stride = 2, .padding = 1}},
      {"dilated", 2, 3, 3, {.stride = {1, 2}, .padding = {2, 1}, .dilation = 2}},
      {"grouped", 4, 4, 3, {.padding = 1, .groups = 2, .bias = false}},
      {"winograd", 16, 16, 3, {.padding = 1}},  // conv2d takes Winograd F(2x2, 3x3) here, checked below
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string p = std::string(c.name) + ".";
    nn::Conv2d conv(c.in, c.out, c.kernel, c.options);
    set(conv.weight, f[p + "weight"]);
    if (c.options.bias) set(conv.bias, f[p + "bias"]);
    const Tensor x = f[p + "x"].clone().requires_grad_();
    CHECK(raw::winograd_applies(x, conv.weight, {.stride = c.options.stride, .padding = c.options.padding.size,
                                                 .dilation = c.options.dilation, .groups = c.options.groups}) ==
          (std::string(c.name) == "winograd"));
    const Tensor y = conv(x);
    check_close(y, f[p + "y"]);
    (y * f[p + "gy"]).sum().backward();
    check_close(x.grad(), f[p + "grad_x"]);
    check_close(conv.weight.grad(), f[p + "grad_weight"]);
    if (c.options.bias) check_close(conv.bias.grad(), f[p + "grad_bias"]);
  }
}

TEST_CASE("MaxPool2d, AvgPool2d and AdaptiveAvgPool2d equal PyTorch's") {
  const Fixture f("pooling.safetensors");
  const Tensor x = f["x"];
  const auto [y, indices] = max_pool2d_with_indices(x, {.kernel_size = 3, .stride = 2, .padding = 1});
  check_close(y, f["max_k3s2p1.y"]);
  CHECK(indices.to_vector<int64_t>() == f["max_k3s2p1.indices"].to_vector<int64_t>());
  const auto [y2, indices2] = max_pool2d_with_indices(x, {.kernel_size = {2, 3}, .stride = 1, .dilation = {2, 1}});
  check_close(y2, f["max_dilated.y"]);
  CHECK(indices2.to_vector<int64_t>() == f["max_dilated.indices"].to_vector<int64_t>());
  check_close(nn::MaxPool2d(2)(x), f["max_k2.y"]);
  check_close(nn::AvgPool2d({.kernel_size = 3, .stride = 2, .padding = 1})(x), f["avg_k3s2p1.y"]);
  check_close(nn::AvgPool2d({.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = false})(x),
              f["avg_k3s2p1_exclude_pad.y"]);
  check_close(nn::AvgPool2d(2)(x), f["avg_k2.y"]);
  check_close(nn::AdaptiveAvgPool2d(1)(x), f["adaptive_1.y"]);
  check_close(nn::AdaptiveAvgPool2d({3, 2})(x), f["adaptive_3x2.y"]);
  check_close(nn::AdaptiveAvgPool2d({4, 4})(x), f["adaptive_4x4.y"]);
}

TEST_CASE("BatchNorm2d: training steps, running statistics, gradients and eval equal PyTorch's") {
  const Fixture f("batchnorm.safetensors");
  nn::BatchNorm2d bn(3);
  set(bn.weight, f["bn2d.weight"]);
  set(bn.bias, f["bn2d.bias"]);
  const Tensor x1 = f["bn2d.x1"].clone().requires_grad_();
  const Tensor y1 = bn(x1);
  check_close(y1, f["bn2d.y1"]);
  check_close(bn.running_mean, f["bn2d.running_mean1"]);
  check_close(bn.running_var, f["bn2d.running_var1"]);  // the unbiased batch variance went in
  (y1 * f["bn2d.gy"]).sum().backward();
  check_close(x1.grad(), f["bn2d.grad_x1"]);
  check_close(bn.weight.grad(), f["bn2d.grad_weight"]);
  check_close(bn.bias.grad(), f["bn2d.grad_bias"]);

  check_close(bn(f["bn2d.x2"]), f["bn2d.y2"]);
  check_close(bn.running_mean, f["bn2d.running_mean2"]);
  check_close(bn.running_var, f["bn2d.running_var2"]);
  CHECK(bn.num_batches_tracked.item() == f["bn2d.num_batches_tracked"].item());
  CHECK(bn.num_batches_tracked.item() == 2);

  bn.eval();
  const std::vector<float> mean_before = bn.running_mean.to_vector<float>();
  check_close(bn(f["bn2d.x3"]), f["bn2d.y3"]);
  CHECK(bn.running_mean.to_vector<float>() == mean_before);  // eval leaves the statistics alone
  CHECK(bn.num_batches_tracked.item() == 2);
}

TEST_CASE("BatchNorm1d: (N, C) with momentum = None, (N, C, L), and no running statistics") {
  const Fixture f("batchnorm.safetensors");
  nn::BatchNorm1d cma(4, {.momentum = std::nullopt});
  cma(f["cma.x1"]);
  check_close(cma(f["cma.x2"]), f["cma.y2"]);
  check_close(cma.running_mean, f["cma.running_mean"]);  // the plain average of the two batches' means
  check_close(cma.running_var, f["cma.running_var"]);

  nn::BatchNorm1d ncl(2);
  check_close(ncl(f["bn1d_ncl.x"]), f["bn1d_ncl.y"]);
  check_close(ncl.running_mean, f["bn1d_ncl.running_mean"]);
  check_close(ncl.running_var, f["bn1d_ncl.running_var"]);

  nn::BatchNorm2d untracked(3, {.affine = false, .track_running_stats = false});
  untracked.eval();  // still normalises with the batch's own statistics
  check_close(untracked(f["untracked.x"]), f["untracked.y"]);
  CHECK(untracked.parameters().empty());
  CHECK(untracked.buffers().empty());
}

TEST_CASE("a conv-BN-ReLU-pool-Linear model loads PyTorch's state dict and computes PyTorch's outputs") {
  const Fixture f("cnn.safetensors");
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dLayerOptions{.padding = 1}),
                       std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::Linear>(36, 5)};
  NamedTensors dict;
  for (const auto& [name, t] : model.state_dict()) dict.emplace_back(name, f["model." + name]);
  model.load_state_dict(dict);  // strict: every key has PyTorch's name, num_batches_tracked included
  check_close(model(f["x"]), f["y_train"]);
  for (const auto& [name, t] : model.state_dict())
    if (name.rfind("1.", 0) == 0) check_close(t, f["after." + name]);
  model.eval();
  check_close(model(f["x"]), f["y_eval"]);
}

TEST_CASE("Conv2d initialises like PyTorch: weight and bias in U(-1/sqrt(fan_in), 1/sqrt(fan_in))") {
  manual_seed(3);
  nn::Conv2d conv(16, 32, 3, {.groups = 2});
  const double bound = 1.0 / std::sqrt(8.0 * 9.0);  // fan_in = 16/2 · 3 · 3
  CHECK(conv.weight.sizes() == Shape({32, 8, 3, 3}));
  const std::vector<float> w = conv.weight.to_vector<float>();
  double max_abs = 0.0, sum_sq = 0.0;
  for (float v : w) max_abs = std::max(max_abs, std::abs(double(v))), sum_sq += double(v) * v;
  CHECK(max_abs <= bound);
  CHECK(max_abs > 0.99 * bound);                                              // fills the whole range
  CHECK(sum_sq / w.size() == doctest::Approx(bound * bound / 3.0).epsilon(0.05));  // U's variance
  for (float v : conv.bias.to_vector<float>()) CHECK(std::abs(v) <= bound);
  CHECK(conv.named_parameters().size() == 2);
  CHECK(nn::Conv2d(3, 4, 1, {.bias = false}).named_parameters().size() == 1);
}

TEST_CASE("BatchNorm keeps running statistics as buffers under PyTorch's names") {
  nn::BatchNorm2d bn(5);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.parameters().size() == 2);
  CHECK(bn.buffers().size() == 3);
  CHECK(bn.num_batches_tracked.dtype() == kInt64);
  CHECK(bn.num_batches_tracked.dim() == 0);
  bn.to(kFloat64);  // floating buffers follow, the counter stays int64
  CHECK(bn.running_var.dtype() == kFloat64);
  CHECK(bn.num_batches_tracked.dtype() == kInt64);
  CHECK(bn.running_var.to_vector<double>() == std::vector<double>(5, 1.0));
}

TEST_CASE("gradcheck: BatchNorm in training mode, through its batch statistics") {
  Generator gen(9);
  const auto input = [&](const Shape& s) { return (rand(s, gen, {.dtype = kFloat64}) * 2.0 - 1.0).requires_grad_(); };
  const auto f = [](const std::vector<Tensor>& p) {
    return nn::F::batch_norm(p[0], Tensor(), Tensor(), p[1], p[2], {.training = true});
  };
  const GradcheckResult r = gradcheck(f, {input({3, 2, 2, 3}), input({2}), input({2})});
  INFO(r.message);
  CHECK(r.ok);
  const GradcheckResult r1 = gradcheck(f, {input({4, 3}), input({3}), input({3})});
  INFO(r1.message);
  CHECK(r1.ok);
  const GradcheckResult r2 = gradcheck(  // affine = false: no weight, no bias
      [](const std::vector<Tensor>& p) { return nn::F::batch_norm(p[0], Tensor(), Tensor(), Tensor(), Tensor(), {.training = true}); },
      {input({3, 2, 4})});
  INFO(r2.message);
  CHECK(r2.ok);
}

TEST_CASE("batch_norm_train's one node equals BatchNorm composed from differentiable ops") {
  Generator gen(10);
  // The reference: the formula written with mean, products and pow, whose backward autograd derives.
  const auto composed = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    const Tensor centered = x - x.mean({0, 2, 3}, true);
    const Tensor var = (centered * centered).mean({0, 2, 3}, true);
    return centered * (var + 1e-5).pow(-0.5) * w.view({1, -1, 1, 1}) + b.view({1, -1, 1, 1});
  };
  const Tensor x0 = randn({4, 3, 5, 2}, gen, {.dtype = kFloat64}) * 3.0 + 1.0;
  const Tensor w0 = rand({3}, gen, {.dtype = kFloat64}) + 0.5, b0 = randn({3}, gen, {.dtype = kFloat64});
  const Tensor gy = randn(x0.sizes(), gen, {.dtype = kFloat64});
  std::vector<Tensor> want, got;
  for (const bool fused : {false, true}) {
    const Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    const Tensor y = fused ? batch_norm_train(x, w, b, 1e-5) : composed(x, w, b);
    (y * gy).sum().backward();
    (fused ? got : want) = {y, x.grad(), w.grad(), b.grad()};
  }
  for (size_t i = 0; i < want.size(); ++i) check_close(got[i], want[i], 1e-12, 1e-10);
}

TEST_CASE("CNN layers reject bad input with one clear error naming the layer and the shapes") {
  nn::Conv2d conv(3, 8, 3);
  CHECK_THROWS_WITH(conv(zeros({8, 8})),
                    doctest::Contains("Conv2d(3, 8, kernel_size=3x3, stride=1x1): expected input of shape (N, 3, H, W) "
                                      "or (3, H, W), got [8, 8]"));
  CHECK_THROWS_WITH(conv(zeros({2, 4, 8, 8})), doctest::Contains("or (3, H, W), got [2, 4, 8, 8]"));
  CHECK_THROWS_WITH(conv(zeros({1, 3, 2, 2})), doctest::Contains("kernel 3x3 (3x3 with dilation) is larger than the "
                                                                 "padded input 2x2"));
  CHECK_NOTHROW(nn::Conv2d(3, 8, 3, {.padding = 1})(zeros({1, 3, 2, 2})));  // padding makes it fit

  nn::BatchNorm2d bn2(4);
  CHECK_THROWS_WITH(bn2(zeros({2, 4, 3})), doctest::Contains("BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, "
                                                             "track_running_stats=true): expected input of shape (N, 4, H, W), got [2, 4, 3]"));
  CHECK_THROWS_WITH(bn2(zeros({2, 3, 5, 5})), doctest::Contains("got [2, 3, 5, 5]"));
  CHECK_THROWS_WITH(bn2(zeros({1, 4, 1, 1})), doctest::Contains("expected more than 1 value per channel when training"));
  CHECK(bn2.num_batches_tracked.item() == 0);  // the refused batch changed nothing
  nn::BatchNorm1d bn1(4);
  CHECK_THROWS_WITH(bn1(zeros({1, 4})), doctest::Contains("BatchNorm1d(4,"));
  CHECK_THROWS_WITH(bn1(zeros({2, 5})), doctest::Contains("expected input of shape (N, 4) or (N, 4, L), got [2, 5]"));
  bn1.eval();
  CHECK_NOTHROW(bn1(zeros({1, 4})));  // eval uses the running statistics: one sample is fine

  CHECK_THROWS_WITH(nn::MaxPool2d(2)(zeros({4, 4})), doctest::Contains("MaxPool2d(kernel_size=2x2"));
  CHECK_THROWS_WITH(nn::AvgPool2d(5)(zeros({1, 1, 4, 4})), doctest::Contains("larger than the padded input"));
}
