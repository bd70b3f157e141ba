// bench_torch_gpt: the libtorch side of bench/bench_gpt.cpp: the same GPT (token and position
// embeddings, 4 pre-LayerNorm blocks with a fused qkv projection, causal attention, exact GELU MLP,
// final LayerNorm, output head tied to the token embedding) and the same step (zero_grad, forward,
// cross-entropy, backward, clip_grad_norm_ to 1.0, AdamW lr 1e-3, betas (0.9, 0.95), weight decay
// 0.1 on the tensors with >= 2 dims only), batch 32, context 64, float32, one thread (MT_BENCH_THREADS: more). libtorch 1.13 has no fused attention, so attention is matmul,
// masked_fill, softmax, matmul. Prints `libtorch gpt_step_ms <value>` (bench/timing.h).
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "../timing.h"

namespace {

constexpr int64_t kVocab = 256, kContext = 64, kDim = 128, kLayers = 4, kHeads = 4;

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln1{torch::nn::LayerNormOptions({kDim})}, ln2{torch::nn::LayerNormOptions({kDim})};
  torch::nn::Linear qkv{kDim, 3 * kDim}, proj{kDim, kDim}, fc1{kDim, 4 * kDim}, fc2{4 * kDim, kDim};
  torch::Tensor future = torch::ones({kContext, kContext}, torch::kBool).triu(1);
  BlockImpl() {
    register_module("ln1", ln1), register_module("ln2", ln2), register_module("qkv", qkv);
    register_module("proj", proj), register_module("fc1", fc1), register_module("fc2", fc2);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), d = kDim / kHeads;
    const auto parts = qkv(ln1(x)).split(kDim, 2);
    const auto heads = [&](const torch::Tensor& t) { return t.view({B, T, kHeads, d}).transpose(1, 2); };
    const torch::Tensor s = torch::matmul(heads(parts[0]), heads(parts[1]).transpose(-1, -2)) / std::sqrt(double(d));
    const torch::Tensor a = torch::matmul(torch::softmax(s.masked_fill(future, -INFINITY), -1), heads(parts[2]));
    const torch::Tensor h = x + proj(a.transpose(1, 2).reshape({B, T, kDim}));
    return h + fc2(torch::gelu(fc1(ln2(h))));
  }
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  torch::nn::Embedding tok{kVocab, kDim}, pos{kContext, kDim};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{torch::nn::LayerNormOptions({kDim})};
  GptImpl() {
    register_module("tok", tok), register_module("pos", pos), register_module("ln_f", ln_f);
    for (int64_t l = 0; l < kLayers; ++l) blocks->push_back(Block());
    register_module("blocks", blocks);
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor h = tok(idx) + pos(torch::arange(idx.size(1)));
    for (const auto& b : *blocks) h = b->as<Block>()->forward(h);
    return torch::nn::functional::linear(ln_f(h), tok->weight);  // tied head
  }
};
TORCH_MODULE(Gpt);

}  // namespace

int main() {
  try {
    at::set_num_threads(bench::torch_threads());  // 1 unless bench/threads.sh says otherwise
    torch::manual_seed(1);
    Gpt gpt;
    const torch::Tensor idx = torch::randint(kVocab, {32, kContext}), targets = torch::randint(kVocab, {32, kContext});
    const std::vector<torch::Tensor> params = gpt->parameters();
    std::vector<torch::Tensor> decay, no_decay;
    for (const torch::Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    const auto options = [](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, options(0.1));
    groups.emplace_back(no_decay, options(0.0));
    torch::optim::AdamW opt(groups);
    double first = 0, last = 0;
    const auto step = [&] {
      opt.zero_grad();
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(gpt->forward(idx).reshape({-1, kVocab}), targets.reshape({-1}));
      loss.backward();
      torch::nn::utils::clip_grad_norm_(params, 1.0);
      opt.step();
      last = loss.item<double>();
      if (first == 0) first = last;
    };
    const bench::Timing t = bench::time_per_call(step, 1.0, 5);
    if (!(last < first)) {
      std::fprintf(stderr, "bench_torch_gpt: the loss did not fall (%g -> %g)\n", first, last);
      return 1;
    }
    bench::report("libtorch", "gpt_step_ms", [](double s) { return s * 1e3; }, t);
    bench::report_cpu_share("libtorch");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
