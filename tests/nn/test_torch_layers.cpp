// The norm layers, masked attention, embedding padding_idx, sort/topk and repeat of issue 40 against
// PyTorch 1.13 in float64: values and the gradients of sum(y * gy) for a random gy agree to 1e-9
// relative. The reference values are in tests/nn/fixtures/layers.safetensors, written by
// tests/nn/make_layer_fixtures.py; a case named "..._t" runs on the transpose of its x on both sides.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "minitrain.h"
#include "nn/nn.h"
#include "torch_fixtures.h"

using namespace mt;

namespace {

const test::TorchFixtures fx("layers.safetensors");
const auto check_close = test::check_close_to_torch;

using Inputs = std::map<std::string, Tensor>;

// Runs f on the case's named inputs (x transposed for "_t"), checks y and each input's gradient.
void check_case(const std::string& name, const std::vector<std::string>& inputs,
                const std::function<Tensor(const Inputs&)>& f) {
  const bool transposed = name.size() > 2 && name.substr(name.size() - 2) == "_t";
  Inputs leaves, args;
  for (const std::string& in : inputs) {
    leaves[in] = fx(name + "." + in).clone().requires_grad_();
    args[in] = in == "x" && transposed ? leaves[in].t() : leaves[in];
  }
  const Tensor y = f(args);
  check_close(y, fx(name + ".y"), name + ": value");
  (y * fx(name + ".gy")).sum().backward();
  for (const std::string& in : inputs) check_close(leaves[in].grad(), fx(name + ".grad_" + in), name + ": d" + in);
}

}  // namespace

TEST_CASE("layer_norm over several trailing dims, with and without affine, equals PyTorch's") {
  check_case("ln_2dims", {"x", "w", "b"}, [](const Inputs& a) {
    return nn::F::layer_norm(a.at("x"), {4, 5}, a.at("w"), a.at("b"));
  });
  check_case("ln_3dims_noaffine", {"x"}, [](const Inputs& a) {
    return nn::LayerNorm(Shape{3, 4, 5}, {.elementwise_affine = false})(a.at("x"));
  });
  check_case("ln_noaffine_t", {"x"}, [](const Inputs& a) { return nn::F::layer_norm(a.at("x"), {6}); });
  check_case("ln_2dims_t", {"x", "w", "b"}, [](const Inputs& a) {
    return nn::F::layer_norm(a.at("x"), {6, 4}, a.at("w"), a.at("b"));
  });
}

TEST_CASE("group_norm and instance_norm equal PyTorch's") {
  check_case("gn", {"x", "w", "b"}, [](const Inputs& a) { return nn::F::group_norm(a.at("x"), 3, a.at("w"), a.at("b")); });
  check_case("gn_noaffine", {"x"}, [](const Inputs& a) { return nn::GroupNorm(2, 4, {.affine = false})(a.at("x")); });
  check_case("gn_2d_groups3", {"x", "w", "b"}, [](const Inputs& a) {
    return nn::F::group_norm(a.at("x"), 3, a.at("w"), a.at("b"));
  });
  check_case("gn_one_group", {"x"}, [](const Inputs& a) { return nn::F::group_norm(a.at("x"), 1); });
  check_case("in", {"x"}, [](const Inputs& a) { return nn::InstanceNorm2d(3)(a.at("x")); });
  check_case("in_affine", {"x", "w", "b"}, [](const Inputs& a) {
    return nn::F::instance_norm(a.at("x"), {}, {}, a.at("w"), a.at("b"));
  });
  check_case("in_unbatched", {"x"}, [](const Inputs& a) { return nn::InstanceNorm2d(3)(a.at("x")); });
}

TEST_CASE("InstanceNorm2d's running statistics: two training steps, then eval, as PyTorch's") {
  nn::InstanceNorm2d m(3, {.momentum = 0.3, .affine = true, .track_running_stats = true});
  m.to(kFloat64);
  {
    NoGradGuard no_grad;
    m.weight.copy_(fx("in_running_eval.w"));
    m.bias.copy_(fx("in_running_eval.b"));
  }
  m.train();
  m(fx("in_running_eval.x0"));
  m(fx("in_running_eval.x1"));
  check_close(m.running_mean, fx("in_running_eval.running_mean"), "running_mean");
  check_close(m.running_var, fx("in_running_eval.running_var"), "running_var");
  m.eval();
  check_case("in_running_eval", {"x"}, [&](const Inputs& a) { return m(a.at("x")); });
}

TEST_CASE("scaled_dot_product_attention with boolean and additive masks, dv != d and 3-D inputs equals PyTorch's") {
  const std::vector<std::string> qkv{"q", "k", "v"};
  for (const char* name : {"sdpa_bool", "sdpa_float_dv5", "sdpa_3d_bool_causal"}) {
    const bool causal = std::string(name).find("causal") != std::string::npos;
    check_case(name, qkv, [&](const Inputs& a) {
      return scaled_dot_product_attention(a.at("q"), a.at("k"), a.at("v"), fx(std::string(name) + ".mask"),
                                          {.causal = causal});
    });
  }
  for (const char* name : {"sdpa_dv3", "sdpa_3d"}) {
    check_case(name, qkv, [](const Inputs& a) { return scaled_dot_product_attention(a.at("q"), a.at("k"), a.at("v")); });
  }
}

TEST_CASE("MultiheadAttention with a key padding mask and an attention mask equals torch.nn.MultiheadAttention") {
  for (const char* name : {"mha_masks", "mha_bool_attn_mask"}) {
    const std::string n = name;
    check_case(n, {"x", "in_w", "in_b", "out_w", "out_b"}, [&](const Inputs& a) {
      nn::MultiheadAttention mha(8, 2);
      mha.to(kFloat64);
      // The module's parameters replaced by the case's leaves, so their gradients can be compared.
      mha.qkv->weight = a.at("in_w"), mha.qkv->bias = a.at("in_b");
      mha.proj->weight = a.at("out_w"), mha.proj->bias = a.at("out_b");
      nn::AttentionMasks masks{.attn_mask = fx(n + ".attn_mask")};
      if (n == "mha_masks") masks.key_padding_mask = fx(n + ".key_padding_mask");
      return mha.forward(a.at("x"), masks);
    });
  }
}

TEST_CASE("embedding with padding_idx equals PyTorch's: that row gets no gradient") {
  check_case("embedding_padding_idx", {"w"}, [](const Inputs& a) {
    return nn::F::embedding(fx("embedding_padding_idx.indices"), a.at("w"), 2);
  });
  check_case("embedding_padding_idx_negative", {"w"}, [](const Inputs& a) {
    return nn::F::embedding(fx("embedding_padding_idx_negative.indices"), a.at("w"), -1);
  });
}

TEST_CASE("sort, topk and argsort equal PyTorch's: values, gradients and indices") {
  const std::map<std::string, std::function<std::tuple<Tensor, Tensor>(const Tensor&)>> cases{
      {"sort_dim1", [](const Tensor& x) { return sort(x, 1); }},
      {"sort_dim0_descending", [](const Tensor& x) { return x.sort(0, true); }},
      {"sort_stable_ties", [](const Tensor& x) { return sort(x, 1); }},
      {"sort_stable_ties_descending", [](const Tensor& x) { return sort(x, 0, true); }},
      {"sort_t", [](const Tensor& x) { return x.sort(); }},
      {"topk3", [](const Tensor& x) { return x.topk(3); }},
      {"topk2_smallest_dim0", [](const Tensor& x) { return topk(x, 2, 0, false); }},
      {"topk4_t", [](const Tensor& x) { return topk(x, 4, 0); }},
  };
  for (const auto& [name, f] : cases) {
    Tensor indices;
    check_case(name, {"x"}, [&](const Inputs& a) {
      auto [values, i] = f(a.at("x"));
      indices = i;
      return values;
    });
    INFO(name);
    CHECK(indices.dtype() == kInt64);
    CHECK(indices.to_vector<int64_t>() == fx(name + ".indices").to_vector<int64_t>());
  }
  CHECK(argsort(fx("argsort_descending.x"), 1, true).to_vector<int64_t>() ==
        fx("argsort_descending.indices").to_vector<int64_t>());
  CHECK(argsort(fx("sort_nan.x"), 1).to_vector<int64_t>() == fx("sort_nan.indices").to_vector<int64_t>());
  CHECK(fx("sort_nan.x").argsort(1, true).to_vector<int64_t>() ==
        fx("sort_nan_descending.indices").to_vector<int64_t>());
}

TEST_CASE("repeat equals PyTorch's, with the gradient summed over the copies") {
  check_case("repeat_same_dims", {"x"}, [](const Inputs& a) { return a.at("x").repeat({2, 3}); });
  check_case("repeat_new_dims", {"x"}, [](const Inputs& a) { return repeat(a.at("x"), {2, 1, 3, 2}); });
  check_case("repeat_t", {"x"}, [](const Inputs& a) { return a.at("x").repeat({3, 2}); });
}
