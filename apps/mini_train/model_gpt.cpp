// mini_train's GPT job: corpus, model, recipe, loss, score and model-file shape (see model_gpt.h).
#include "apps/mini_train/model_gpt.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "optim/adam.h"
#include "tensor/generator.h"

namespace mt::app {

namespace {

constexpr int64_t kVocab = 256;  // byte values

// logits (B, T, V), target (B, T) -> mean over the B·T positions of -log softmax(logits)[target]
class NextByteLoss : public nn::Loss {
 public:
  NextByteLoss() : Loss({}) {}
  Tensor forward(const Tensor& logits, const Tensor& target) override {
    return nn::F::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
  }
  std::string name() const override { return "NextByteLoss"; }
};

}  // namespace

nn::GPTOptions gpt_options(const Options& o) {
  return {.vocab = kVocab, .context = o.context, .dim = o.dim, .layers = o.layers, .heads = o.heads};
}

void load_text_data(const Options& o, Data& d) {
  const std::string path = o.text.empty() ? data::kDefaultTextCorpus : o.text;
  const data::TextCorpus corpus = data::load_text_corpus(path, {.context = o.context});
  d.text_train = std::make_shared<data::TextWindowDataset>(corpus.train, o.context);
  d.text_validation = std::make_shared<data::TextWindowDataset>(corpus.validation, o.context,
                                                                data::TextWindowOptions{.stride = o.context});
  d.classification = true;  // the next byte is one of 256 classes
  d.task_reason = "the next byte at every position, 256 classes";
  d.in_features = o.context, d.out_features = kVocab;
  std::ostringstream os;
  os << "text " << path << " (" << corpus.train->size() << " bytes train, " << corpus.validation->size()
     << " validation; windows of " << o.context << " + 1 bytes)";
  d.description = os.str();
}

std::string gpt_signature(const Options& o) {
  std::ostringstream os;
  os << "gpt:layers" << o.layers << "-heads" << o.heads << "-dim" << o.dim << "-context" << o.context;
  return os.str();
}

std::shared_ptr<nn::GPT> build_gpt(const Options& o) { return std::make_shared<nn::GPT>(gpt_options(o)); }

std::shared_ptr<nn::Loss> next_byte_loss() { return std::make_shared<NextByteLoss>(); }

std::unique_ptr<optim::Optimizer> build_gpt_optimizer(const Options& o, const nn::Module& model) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const optim::AdamWOptions with_decay{.lr = o.lr, .betas = {0.9, 0.95}, .weight_decay = o.weight_decay};
  auto opt = std::make_unique<optim::AdamW>(decay, with_decay);
  optim::AdamWOptions without = with_decay;
  without.weight_decay = 0;
  if (!no_decay.empty()) opt->add_param_group(no_decay, without);
  return opt;
}

double gpt_lr_factor(int64_t t, int64_t total_steps) {
  if (t < kWarmupSteps) return static_cast<double>(t + 1) / kWarmupSteps;
  const double progress = std::min(1.0, static_cast<double>(t - kWarmupSteps) /
                                            static_cast<double>(std::max<int64_t>(total_steps - kWarmupSteps, 1)));
  return kFinalLrFactor + (1 - kFinalLrFactor) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

std::unique_ptr<optim::LRScheduler> build_gpt_scheduler(optim::Optimizer& opt, int64_t total_steps) {
  return std::make_unique<optim::LambdaLR>(opt, [total_steps](int64_t t) { return gpt_lr_factor(t, total_steps); });
}

Score evaluate_text(nn::Module& model, const data::TextWindowDataset& set, const Device& device, ProgressBar* bar) {
  NoGradGuard no_grad;
  model.eval();
  constexpr int64_t kChunk = 64;  // windows per forward
  double total = 0;
  std::vector<int64_t> indices;
  for (int64_t start = 0; start < set.size(); start += kChunk) {
    indices.clear();
    for (int64_t i = start; i < std::min(start + kChunk, set.size()); ++i) indices.push_back(i);
    const data::Batch b = set.get_batch(indices);
    const Tensor logits = model.forward(b.input.to(device));  // (n, T, 256)
    const Tensor loss = nn::F::cross_entropy(logits.reshape({-1, kVocab}), b.target.to(device).reshape({-1}),
                                             {.reduction = nn::kSum});
    total += loss.to(kCPU).item();
    if (bar) bar->update(start + static_cast<int64_t>(indices.size()), start + static_cast<int64_t>(indices.size()));
  }
  model.train();
  return {.value = total / static_cast<double>(set.size() * set.context()), .classification = false};
}

void add_gpt_metadata(Metadata& m, const Options& o) {
  m["layers"] = std::to_string(o.layers);
  m["heads"] = std::to_string(o.heads);
  m["dim"] = std::to_string(o.dim);
  m["context"] = std::to_string(o.context);
  m["vocab"] = std::to_string(kVocab);
  m["text"] = o.text.empty() ? data::kDefaultTextCorpus : o.text;
}

Score evaluate_saved_gpt(const nn::LoadedModel& gpt, const std::string& path, std::string text) {
  if (text.empty()) {
    const auto it = gpt.info.metadata.find("text");
    MT_CHECK(it != gpt.info.metadata.end(), path, ": the metadata does not say which text the model was trained "
             "on; give --text");
    text = it->second;
  }
  Options o;
  o.text = text, o.context = gpt.info.gpt.context;
  Data d;
  load_text_data(o, d);
  ProgressBar bar(true, "Evaluating test", d.text_validation->size());  // in a terminal only
  return evaluate_text(*gpt.module, *d.text_validation, kCPU, &bar);
}

}  // namespace mt::app
