// The network ops on bfloat16 and float16 tensors (issue 39): each against PyTorch 1.13's CPU result
// (tests/nn/make_lowp_fixtures.py writes lowp_nn.safetensors; where PyTorch has no 16-bit kernel,
// its float32 result on the same values rounded once), and against the same op run in float32 on
// the widened inputs: a 16-bit op computes in float32 and rounds once (Note [Low-precision compute
// type]), so its output and gradients are the float32 results rounded, to within one 16-bit ulp.
//
// One ulp, not bits: the 16-bit kernels sum in another order than the float32 ones (tiles, per-head
// buffers), and two float32 sums a few float32 ulps apart round to neighbouring 16-bit values when
// they straddle a rounding boundary; where a sum cancels to near zero, the float32 orders' difference
// may exceed one ulp of the tiny result, so that is allowed up to 2^-16 of the tensor's largest
// value. PyTorch's own bfloat16 kernels round intermediate results in places, so against the
// fixtures the tolerance is Note [Low-precision tolerances]'s (tests/tensor/test_lowp_torch.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tests/tensor/lowp_test_util.h"

using namespace mt;
using mt::test::bits16;
using mt::test::lowp_prefix;

namespace {

const mt::test::TorchFixtures& fixtures() {
  static const mt::test::TorchFixtures f("lowp_nn.safetensors");
  return f;
}

Tensor fixture(DType dt, const std::string& name) { return fixtures()(lowp_prefix(dt) + name); }

// A 16-bit pattern as an integer that orders like the value it holds (sign-magnitude to signed).
int ordered(uint16_t h) { return (h & 0x8000u) ? -static_cast<int>(h & 0x7FFFu) : static_cast<int>(h); }

// got (16-bit) is want (float32) rounded to got's dtype, within one ulp (or 2^-16 of the largest
// |want| where the sum cancelled: the file's comment).
void check_rounded_once(const Tensor& got, const Tensor& want32, const std::string& what) {
  INFO(what << " (" << dtype_name(got.dtype()) << ")");
  REQUIRE(got.sizes() == want32.sizes());
  REQUIRE(want32.dtype() == kFloat32);
  const std::vector<uint16_t> g = bits16(got), w = bits16(want32.to(got.dtype()));
  const std::vector<double> gv = got.to_vector<double>(), wv = want32.to_vector<double>();
  double scale = 0;
  for (double v : wv) scale = std::max(scale, std::abs(v));
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const bool near = std::abs(ordered(g[i]) - ordered(w[i])) <= 1 || std::abs(gv[i] - wv[i]) <= std::ldexp(scale, -16);
    if (!near) {
      ++bad;
      FAIL_CHECK("element " << i << ": 16-bit " << gv[i] << ", float32 " << wv[i]);
    }
  }
}

// Within one 16-bit ulp of PyTorch's value, plus one ulp of the tensor's largest value (Note
// [Low-precision tolerances]).
void check_near_torch(const Tensor& got, DType dt, const std::string& name) {
  REQUIRE(got.dtype() == dt);
  mt::test::check_within_ulp_of_torch(got, fixture(dt, name), lowp_prefix(dt) + name);
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

struct Run {
  Tensor out;
  std::vector<Tensor> grads;
};

// op(inputs) and, for out.backward(gy), the gradients of the first `grads` inputs.
Run run(const Op& op, const std::vector<Tensor>& inputs, int grads, const Tensor& gy) {
  std::vector<Tensor> in;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor t = inputs[k].detach().clone();
    if (static_cast<int>(k) < grads) t.requires_grad_();
    in.push_back(t);
  }
  Run r;
  r.out = op(in);
  r.out.backward(gy);
  for (int k = 0; k < grads; ++k) r.grads.push_back(in[k].grad());
  r.out = r.out.detach();
  return r;
}

Tensor widened(const Tensor& t) { return is_low_precision(t.dtype()) ? t.to(kFloat32) : t; }

// The op on 16-bit inputs equals the op on their float32 widening, rounded once: output and gradients.
void check_against_float32(const Op& op, const std::vector<Tensor>& inputs, int grads, const Tensor& gy,
                           const std::string& name) {
  const Run low = run(op, inputs, grads, gy);
  std::vector<Tensor> wide;
  for (const Tensor& t : inputs) wide.push_back(widened(t));
  const Run ref = run(op, wide, grads, widened(gy));
  REQUIRE(low.out.dtype() == inputs[0].dtype());
  check_rounded_once(low.out, ref.out, name + " out");
  for (int k = 0; k < grads; ++k) {
    CHECK(low.grads[k].dtype() == inputs[k].dtype());
    check_rounded_once(low.grads[k], ref.grads[k], name + " grad" + std::to_string(k));
  }
}

// The fixture's op: inputs <name>.in<k>, output gradient <name>.gy; against PyTorch and, for an op
// that rounds once, against float32.
void check_op(DType dt, const std::string& name, int inputs, int grads, const Op& op, bool rounds_once = true) {
  std::vector<Tensor> in;
  for (int k = 0; k < inputs; ++k) in.push_back(fixture(dt, name + ".in" + std::to_string(k)));
  const Tensor gy = fixture(dt, name + ".gy");
  const Run r = run(op, in, grads, gy);
  check_near_torch(r.out, dt, name + ".out");
  for (int k = 0; k < grads; ++k) check_near_torch(r.grads[k], dt, name + ".grad" + std::to_string(k));
  if (rounds_once) check_against_float32(op, in, grads, gy, lowp_prefix(dt) + name);
}

// |a - b| / |b| in the 2-norm: how far a 16-bit network's gradient is from its float32 one. Not
// elementwise: where a ReLU's input or a pooling window's maximum sits within rounding of its
// alternative, the two forwards take different branches and single elements differ entirely.
double norm_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, size = 0;
  for (size_t i = 0; i < x.size(); ++i) err += (x[i] - y[i]) * (x[i] - y[i]), size += y[i] * y[i];
  return std::sqrt(err / size);
}

Tensor pattern(const Shape& shape, int64_t seed, DType dt, double scale = 1.0) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (int64_t i = 0; i < shape.numel(); ++i)
    v[i] = static_cast<float>(scale * static_cast<double>((i * 7919 + seed * 104729) % 1999 - 999) / 512);
  return from_vector(v, shape).to(dt);
}

}  // namespace

TEST_CASE("lowp nn: conv2d in bfloat16 and float16 sums in float32, forward and backward") {
  for (DType dt : {kBFloat16, kFloat16}) {
    check_op(dt, "conv", 3, 3, [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {.padding = 1}); });
    // 16 channels, 3x3, stride 1: Winograd's shape in float32; 16-bit takes im2col.
    check_op(dt, "conv16", 2, 2, [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], {}, {.padding = 1}); });
    check_op(dt, "conv_s2g2", 2, 2,
             [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], {}, {.stride = 2, .groups = 2}); });
    // A pointwise (1x1) layer takes no im2col; 40 samples split the weight gradient into strands.
    const Tensor x = pattern({40, 8, 5, 5}, 1, dt), w = pattern({12, 8, 1, 1}, 2, dt), b = pattern({12}, 3, dt);
    check_against_float32([](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2]); }, {x, w, b}, 3,
                          pattern({40, 12, 5, 5}, 4, dt), lowp_prefix(dt) + "pointwise conv");
    // A weight gradient that sums 40 samples of 1,369 positions: float32 sums, rounded once.
    const Tensor x2 = pattern({40, 3, 37, 37}, 5, dt), w2 = pattern({4, 3, 3, 3}, 6, dt, 0.1);
    check_against_float32([](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], {}, {.padding = 1}); }, {x2, w2},
                          2, pattern({40, 4, 37, 37}, 7, dt), lowp_prefix(dt) + "long conv");
    // conv_transpose2d is conv2d's input gradient: the float32 col2im path in its forward. (Its bias
    // is added to the rounded result, a second rounding, so it is left out here.)
    check_against_float32(
        [](const std::vector<Tensor>& t) { return conv_transpose2d(t[0], t[1], {}, {.stride = 2, .padding = 1}); },
        {pattern({3, 6, 5, 5}, 10, dt), pattern({6, 4, 3, 3}, 11, dt)}, 2, pattern({3, 4, 9, 9}, 13, dt),
        lowp_prefix(dt) + "conv_transpose2d");
  }
}

TEST_CASE("lowp nn: 16-bit convolution makes no float32 copy of its input") {
  // x (32, 16, 64, 64) bfloat16: 4 MiB; a float32 copy would be 8 MiB. Beside the output (4 MiB), each
  // thread holds one sample's columns (16·9·4096 bfloat16) and the GEMM's tile scratch (3·256² float32).
  const Tensor x = pattern({32, 16, 64, 64}, 8, kBFloat16), w = pattern({16, 16, 3, 3}, 9, kBFloat16, 0.1);
  reset_cpu_peak_memory();
  const size_t before = cpu_memory_stats().bytes_in_use;
  const Tensor y = conv2d(x, w, {}, {.padding = 1});
  const size_t extra = cpu_memory_stats().peak_bytes_in_use - before;
  const size_t output = 2 * static_cast<size_t>(y.numel());
  const size_t per_thread = 16 * 9 * 4096 * 2 + 3 * 256 * 256 * 4;
  const size_t threads = static_cast<size_t>(std::max(get_num_threads(), 1));
  INFO("peak above the inputs: " << extra << " bytes, output " << output << ", per thread " << per_thread);
  CHECK(y.dtype() == kBFloat16);
  CHECK(extra <= output + threads * per_thread);
  CHECK(extra < output + 4 * static_cast<size_t>(x.numel()));  // less than one float32 copy of x
}

TEST_CASE("lowp nn: scaled_dot_product_attention in bfloat16 and float16 keeps float32 scores and sums") {
  for (DType dt : {kBFloat16, kFloat16}) {
    // PyTorch 1.13 has no fused attention: the fixture is its float32 composition on the 16-bit values.
    check_op(dt, "attention", 3, 3, [](const std::vector<Tensor>& t) {
      return scaled_dot_product_attention(t[0], t[1], t[2], {.causal = true});
    });
    // Not causal, 20 queries of 37 keys, q, k, v head views of one fused (B, T, 3, H, d) projection.
    check_against_float32(
        [](const std::vector<Tensor>& t) {
          const Tensor h = t[0].permute({2, 0, 3, 1, 4});  // (3, B, H, T, d)
          return scaled_dot_product_attention(h.narrow(0, 0, 1).squeeze(0).narrow(2, 0, 20),
                                              h.narrow(0, 1, 1).squeeze(0), h.narrow(0, 2, 1).squeeze(0));
        },
        {pattern({2, 37, 3, 2, 16}, 11, dt, 0.5)}, 1, pattern({2, 2, 20, 16}, 12, dt),
        lowp_prefix(dt) + "attention on head views");
  }
}

TEST_CASE("lowp nn: softmax, log_softmax, layer_norm and GELU compute in float32 and round once") {
  for (DType dt : {kBFloat16, kFloat16}) {
    check_op(dt, "softmax", 1, 1, [](const std::vector<Tensor>& t) { return softmax(t[0], -1); });
    check_op(dt, "log_softmax", 1, 1, [](const std::vector<Tensor>& t) { return log_softmax(t[0], -1); });
    check_op(dt, "layer_norm", 3, 3, [](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2]); });
    check_op(dt, "gelu", 1, 1, [](const std::vector<Tensor>& t) { return gelu(t[0]); });
    check_op(dt, "gelu_tanh", 1, 1, [](const std::vector<Tensor>& t) { return gelu(t[0], GeluApproximate::Tanh); });
    // Rows longer than a vector and GELU past one widened block: 3 rows of 700.
    const Tensor x = pattern({3, 700}, 13, dt, 4.0), gy = pattern({3, 700}, 14, dt);
    check_against_float32([](const std::vector<Tensor>& t) { return softmax(t[0], -1); }, {x}, 1, gy,
                          lowp_prefix(dt) + "softmax of 700");
    check_against_float32([](const std::vector<Tensor>& t) { return gelu(t[0]); }, {x}, 1, gy,
                          lowp_prefix(dt) + "gelu of 2100");
    check_against_float32([](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2]); },
                          {x, pattern({700}, 15, dt), pattern({700}, 16, dt)}, 3, gy, lowp_prefix(dt) + "layer_norm of 700");
  }
}

TEST_CASE("lowp nn: batch_norm, group_norm and pooling in bfloat16 and float16") {
  namespace F = nn::functional;
  for (DType dt : {kBFloat16, kFloat16}) {
    check_op(dt, "batch_norm", 3, 3,
             [](const std::vector<Tensor>& t) { return batch_norm_train(t[0], t[1], t[2], 1e-5); });
    // group_norm's affine map rounds again after the normalisation: against PyTorch only.
    check_op(
        dt, "group_norm", 3, 3, [](const std::vector<Tensor>& t) { return F::group_norm(t[0], 2, t[1], t[2]); }, false);
    check_op(dt, "max_pool", 1, 1, [](const std::vector<Tensor>& t) { return max_pool2d(t[0], {.kernel_size = 2}); });
    check_op(dt, "avg_pool", 1, 1, [](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {.kernel_size = 2}); });
    // Eval mode: float32 statistics, y rounded once. Running buffers updated in training round into them.
    const Tensor x = fixture(dt, "batch_norm.in0"), w = fixture(dt, "batch_norm.in1");
    const Tensor b = fixture(dt, "batch_norm.in2");
    Tensor mean = zeros({3}, {.dtype = dt}), var = ones({3}, {.dtype = dt});
    F::batch_norm(x, mean, var, w, b, {.training = true});
    CHECK(mean.dtype() == dt);
    const Tensor batch_mean = x.to(kFloat32).mean({0, 2, 3});
    check_rounded_once(mean, batch_mean * 0.1, "running mean");
    const Tensor y = F::batch_norm(x, mean, var, w, b, {.training = false});
    const auto f32 = [](const Tensor& t) { return t.to(kFloat32); };
    const Tensor y32 = F::batch_norm(f32(x), f32(mean), f32(var), f32(w), f32(b), {.training = false});
    check_rounded_once(y, y32, "eval batch_norm");
  }
}

TEST_CASE("lowp nn: embedding, dropout and the losses in bfloat16 and float16") {
  namespace F = nn::functional;
  for (DType dt : {kBFloat16, kFloat16}) {
    check_op(dt, "embedding", 2, 1, [](const std::vector<Tensor>& t) { return embedding(t[0], t[1]); });
    // The losses' mean multiplies by 1/N rounded to the dtype first (a number next to a 16-bit tensor
    // is, as in PyTorch), so their gradients are compared with PyTorch's only.
    check_op(
        dt, "cross_entropy", 2, 1, [](const std::vector<Tensor>& t) { return F::cross_entropy(t[0], t[1]); }, false);
    check_op(dt, "nll", 2, 1, [](const std::vector<Tensor>& t) { return F::nll_loss(t[0], t[1]); }, false);
    // Dropout draws in float32: the same generator state drops the same elements as float32 dropout.
    // x·keep is exact; its scale 1/(1-p) is rounded to 16 bits (a number), within a fifth of an ulp.
    const Tensor x = pattern({9, 50}, 17, dt), gy = pattern({9, 50}, 18, dt);
    check_against_float32(
        [](const std::vector<Tensor>& t) {
          Generator gen(39);
          return F::dropout(t[0], {.p = 0.3, .generator = &gen});
        },
        {x}, 1, gy, lowp_prefix(dt) + "dropout");
  }
}

// Every parameter's gradient of a 16-bit network within `tolerance` of its float32 twin's (norm_error).
void check_gradients(const nn::Module& wide, const nn::Module& narrow, DType dt, double tolerance) {
  const auto params = wide.named_parameters(), params16 = narrow.named_parameters();
  REQUIRE(params.size() == params16.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    const Tensor g = params[i].second.grad(), g16 = params16[i].second.grad();
    REQUIRE(g16.dtype() == dt);
    // A conv bias ahead of batch norm has gradient 0 (the normalisation takes it out again): in
    // float32 it is rounding noise, and the 16-bit one must be small too.
    if (g.abs().max().item() < 1e-6) CHECK(g16.abs().max().item() < 1e-3);
    else CHECK(norm_error(g16, g) < tolerance);
  }
}

TEST_CASE("lowp nn: the GPT and CNN presets train a step in bfloat16 and float16, near their float32 step") {
  namespace F = nn::functional;
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(std::string(dtype_name(dt)));
    // The same weights in float32 and in 16 bits; one step's loss and gradients compared.
    const nn::GPTOptions small{.vocab = 64, .context = 16, .dim = 32, .layers = 2, .heads = 4};
    manual_seed(39);
    nn::GPT gpt(small);
    manual_seed(39);
    nn::GPT gpt16(small);
    gpt16.to(dt);
    std::vector<int64_t> tokens(3 * 17);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 37 + 11) % 64);
    const Tensor seq = from_vector(tokens, {3, 17});
    const Tensor idx = seq.narrow(1, 0, 16).contiguous(), target = seq.narrow(1, 1, 16).contiguous().view({48});
    const auto loss_of = [&](nn::GPT& m) { return F::cross_entropy(m.forward(idx).view({48, 64}), target); };
    const Tensor loss = loss_of(gpt), loss16 = loss_of(gpt16);
    CHECK(loss16.dtype() == dt);
    CHECK(std::abs(loss16.item() - loss.item()) < 0.02 * loss.item());
    loss.backward(), loss16.backward();
    check_gradients(gpt, gpt16, dt, 0.05);  // measured: at most 0.011 (bfloat16)
    // The CNN: conv, batch norm, ReLU, max pooling, linear; 8 images of 28x28. Its ReLUs and
    // pooling windows branch, and some branches differ between the two forwards.
    manual_seed(40);
    auto cnn = nn::make_image_cnn(10);
    manual_seed(40);
    auto cnn16 = nn::make_image_cnn(10);
    cnn16->to(dt);
    const Tensor images = pattern({8, 784}, 19, kFloat32, 0.5);
    const Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    const Tensor cnn_loss = F::cross_entropy(cnn->forward(images), labels);
    const Tensor cnn_loss16 = F::cross_entropy(cnn16->forward(images.to(dt)), labels);
    CHECK(cnn_loss16.dtype() == dt);
    CHECK(std::abs(cnn_loss16.item() - cnn_loss.item()) < 0.02 * cnn_loss.item());
    cnn_loss.backward(), cnn_loss16.backward();
    check_gradients(*cnn, *cnn16, dt, dt == kBFloat16 ? 0.15 : 0.06);  // measured: 0.10 and 0.036
  }
}

TEST_CASE("lowp nn: a bfloat16 model saved to safetensors and loaded is the same bits, and stays bfloat16") {
  manual_seed(41);
  auto cnn = nn::make_image_cnn(10);
  cnn->to(kBFloat16);
  const std::string bytes = encode_safetensors(cnn->state_dict());
  const SafetensorsFile file =
      decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "<memory>");
  manual_seed(42);  // other weights, overwritten by the load
  auto back = nn::make_image_cnn(10);
  back->to(kBFloat16);
  back->load_state_dict(file.tensors);
  const auto saved = cnn->state_dict(), loaded = back->state_dict();
  REQUIRE(saved.size() == loaded.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    INFO(saved[i].first);
    CHECK(loaded[i].second.dtype() == saved[i].second.dtype());
    if (is_low_precision(saved[i].second.dtype())) CHECK(bits16(loaded[i].second) == bits16(saved[i].second));
    else CHECK(loaded[i].second.to_vector<int64_t>() == saved[i].second.to_vector<int64_t>());  // num_batches_tracked
  }
  // A float32 model loads the same file widened, exactly.
  auto wide = nn::make_image_cnn(10);
  wide->load_state_dict(file.tensors);
  CHECK(wide->named_parameters()[0].second.dtype() == kFloat32);
  CHECK(wide->named_parameters()[0].second.to(kBFloat16).to_vector<float>() ==
        cnn->named_parameters()[0].second.to_vector<float>());
}

TEST_CASE("lowp nn: cumsum runs its sums in float32, forward and backward") {
  for (DType dt : {kBFloat16, kFloat16}) {
    // Along the last dim (rows side by side) and along a middle one (a running row).
    const Tensor x = pattern({3, 300, 5}, 20, dt), gy = pattern({3, 300, 5}, 21, dt);
    check_against_float32([](const std::vector<Tensor>& t) { return cumsum(t[0], 1); }, {x}, 1, gy,
                          lowp_prefix(dt) + "cumsum over a middle dim");
    check_against_float32([](const std::vector<Tensor>& t) { return cumsum(t[0], 2); }, {x.transpose(1, 2).contiguous()},
                          1, gy.transpose(1, 2).contiguous(), lowp_prefix(dt) + "cumsum over the last dim");
    // 4096 ones: a 16-bit running sum would stop at 256 (bfloat16) or 2048 (float16).
    CHECK(cumsum(ones({4096}, {.dtype = dt}), 0).to_vector<float>().back() == 4096.0f);
  }
}

TEST_CASE("lowp nn: bilinear interpolation weighs and sums in float32") {
  for (DType dt : {kBFloat16, kFloat16}) {
    for (bool corners : {false, true}) {
      check_against_float32(
          [corners](const std::vector<Tensor>& t) {
            return interpolate(t[0], {.size = {11, 7}, .mode = InterpolateMode::Bilinear, .align_corners = corners});
          },
          {pattern({2, 3, 5, 4}, 22, dt)}, 1, pattern({2, 3, 11, 7}, 23, dt),
          lowp_prefix(dt) + (corners ? "bilinear, corners aligned" : "bilinear"));
    }
  }
}

TEST_CASE("lowp nn: a 16-bit GPT and CNN step are the same bits at 1, 2 and 3 threads") {
  namespace F = nn::functional;
  // The loss and every gradient's bits, for one step of each preset in bfloat16.
  const auto step_bits = [] {
    std::vector<uint16_t> bits;
    const auto add = [&bits](const Tensor& t) {
      const std::vector<uint16_t> b = bits16(t);
      bits.insert(bits.end(), b.begin(), b.end());
    };
    manual_seed(43);
    nn::GPT gpt(nn::GPTOptions{.vocab = 64, .context = 32, .dim = 64, .layers = 1, .heads = 4});
    gpt.to(kBFloat16);
    std::vector<int64_t> tokens(4 * 32);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 29 + 5) % 64);
    const Tensor idx = from_vector(tokens, {4, 32});
    const Tensor loss = F::cross_entropy(gpt.forward(idx).view({128, 64}), idx.view({128}));
    loss.backward();
    add(loss);
    for (const auto& [name, p] : gpt.named_parameters()) add(p.grad());
    manual_seed(44);
    auto cnn = nn::make_image_cnn(10);
    cnn->to(kBFloat16);
    const Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}, {12});
    const Tensor cnn_loss = F::cross_entropy(cnn->forward(pattern({12, 784}, 24, kBFloat16)), labels);
    cnn_loss.backward();
    add(cnn_loss);
    for (const auto& [name, p] : cnn->named_parameters()) add(p.grad());
    return bits;
  };
  std::vector<uint16_t> one;
  {
    NumThreadsGuard guard(1);
    one = step_bits();
  }
  for (int threads : {2, 3}) {
    NumThreadsGuard guard(threads);
    CHECK(step_bits() == one);
  }
}
