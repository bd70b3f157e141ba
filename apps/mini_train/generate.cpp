// `mini_train generate` (see generate.h).
#include "apps/mini_train/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "apps/mini_train/model_file.h"
#include "apps/mini_train/options.h"
#include "autograd/grad_mode.h"
#include "nn/model_file.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

namespace mt::app {

namespace {

// One byte drawn from the logits of one position (vocab values).
int64_t sample(std::vector<float> logits, const GenerateOptions& s, Generator& gen) {
  const auto best = std::max_element(logits.begin(), logits.end());
  if (s.temperature == 0) return best - logits.begin();
  if (s.top_k > 0 && s.top_k < static_cast<int64_t>(logits.size())) {
    std::vector<float> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (s.top_k - 1), sorted.end(), std::greater<>());
    const float kth = sorted[s.top_k - 1];  // ties with the k-th stay in: at least k candidates
    for (float& l : logits)
      if (l < kth) l = -INFINITY;
  }
  // p_i = exp((l_i - max) / T) / Σ_j exp((l_j - max) / T), then the inverse CDF at u ~ U[0, 1).
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - *best) / s.temperature);
  double u = gen.next_double() * total;
  for (size_t i = 0; i < p.size(); ++i) {
    if (u < p[i]) return static_cast<int64_t>(i);
    u -= p[i];
  }
  return best - logits.begin();  // rounding left u past the end: the most likely byte
}

}  // namespace

int run_generate(int argc, char** argv) {
  GenerateOptions s;
  int exit_code = 0;
  if (!parse_generate_options(argc, argv, s, &exit_code)) return exit_code;  // options.h
  // The text is kept whole and printed at the end, so its length is bounded.
  MT_CHECK(s.tokens >= 0 && s.tokens <= 1000000, "--tokens must be in 0..1000000, got ", s.tokens);
  MT_CHECK(std::isfinite(s.temperature) && s.temperature >= 0, "--temperature must be >= 0, got ", s.temperature);
  MT_CHECK(s.top_k >= 0, "--top-k must be >= 0, got ", s.top_k);
  MT_CHECK(s.seed >= 0, "--seed must be >= 0, got ", s.seed);
  MT_CHECK(!s.prompt.empty(), "--prompt is empty: give at least one byte to continue");

  const nn::LoadedModel model = load_saved_model(s.init);  // a model file or a checkpoint (model_file.h)
  MT_CHECK(model.info.kind == "gpt", s.init, ": the model is '", model.info.signature, "', not a GPT; mini_train "
           "generate needs a model saved by mini_train --model gpt");
  const nn::GPTOptions shape = model.info.gpt;
  // Note [Prompt longer than the context] (generate.h).
  MT_CHECK(static_cast<int64_t>(s.prompt.size()) <= shape.context, "--prompt is ", s.prompt.size(),
           " bytes, more than the model's context of ", shape.context, " bytes: give at most ", shape.context,
           " (the model cannot see further back)");

  NoGradGuard no_grad;
  Generator gen(static_cast<uint64_t>(s.seed));
  std::vector<int64_t> text(s.prompt.begin(), s.prompt.end());
  for (int64_t& b : text) b = static_cast<unsigned char>(b);
  for (int64_t n = 0; n < s.tokens; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(text.size()), shape.context);
    const Tensor window = from_vector(std::vector<int64_t>(text.end() - t, text.end()), {1, t});
    const Tensor logits = model.module->forward(window);  // (1, t, vocab)
    text.push_back(sample(raw::contiguous(raw::narrow(logits, 1, t - 1, 1)).to_vector<float>(), s, gen));
  }
  std::string out(text.begin(), text.end());
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace mt::app
