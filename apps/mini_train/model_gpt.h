// mini_train's GPT job (--model gpt, --dataset text): the byte-level corpus, the model, its recipe
// (AdamW with weight decay on matrices only, warm-up then cosine decay), the next-byte loss, the
// test score in nats per byte, and what the model file says about the model's shape. job.cpp,
// trainer.cpp and model_file.cpp call in here when the options ask for a GPT; nn::load_model
// (nn/model_file.h) reads a saved GPT back for `mini_train generate` (generate.h) and `eval`.
//
// The recipe (GPT-2's, scaled down; the preset of options.cpp):
//   AdamW lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on tensors with >= 2 dims (linear and
//   embedding matrices); biases and LayerNorm gains/shifts are not decayed (a second param group)
//   lr: linear warm-up over kWarmupSteps steps, then a half cosine down to lr/10 at the last step
//   gradients clipped to global L2 norm 1.0 (--clip-grad, trainer.cpp), batch 32 per device
// bench/gpt_torch.py trains the same recipe in PyTorch.
//
// Not here: sampling (generate.cpp), tokenizers, dropout.
#pragma once

#include <memory>
#include <string>

#include "apps/mini_train/evaluate.h"
#include "apps/mini_train/job.h"
#include "apps/mini_train/model_file.h"
#include "apps/mini_train/options.h"
#include "data/text.h"
#include "nn/model_file.h"
#include "nn/transformer.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace mt::app {

inline constexpr int64_t kWarmupSteps = 100;  // steps of linear warm-up before the cosine decay
inline constexpr double kFinalLrFactor = 0.1;  // the cosine ends at lr · this (1e-4 for the preset)

nn::GPTOptions gpt_options(const Options& opts);

// --text (default: data::kDefaultTextCorpus) into d.text_train (every window, stride 1) and
// d.text_validation (non-overlapping windows); also the config table's description.
void load_text_data(const Options& opts, Data& d);

// "gpt:layers4-heads4-dim128-context64": what a checkpoint must match to be resumed.
std::string gpt_signature(const Options& opts);
std::shared_ptr<nn::GPT> build_gpt(const Options& opts);
// Cross-entropy of logits (B, T, 256) against next bytes (B, T), averaged over all B·T positions.
std::shared_ptr<nn::Loss> next_byte_loss();
// AdamW with two groups: group 0 the >= 2-dim tensors (weight decay --weight-decay), group 1 the rest
// (no decay). Both start at --lr.
std::unique_ptr<optim::Optimizer> build_gpt_optimizer(const Options& opts, const nn::Module& model);
// Warm-up then cosine to lr · kFinalLrFactor over total_steps (see the header comment).
std::unique_ptr<optim::LRScheduler> build_gpt_scheduler(optim::Optimizer& opt, int64_t total_steps);
// The lr factor at step t (0-based) of a run of total_steps: what the scheduler multiplies by.
double gpt_lr_factor(int64_t t, int64_t total_steps);

// Mean next-byte cross-entropy in nats over every window of `set` (no-grad, eval mode).
// `bar` (may be null): advanced after each chunk, windows as its steps.
Score evaluate_text(nn::Module& model, const data::TextWindowDataset& set, const Device& device,
                    ProgressBar* bar = nullptr);

// The model file's shape keys: "layers", "heads", "dim", "context", "vocab", and "text" (the corpus).
void add_gpt_metadata(Metadata& metadata, const Options& opts);
// `mini_train eval` of a saved GPT (nn::load_model's, from `path`): its test loss (nats per byte) on
// the validation part of `text`, by default the corpus its metadata names.
Score evaluate_saved_gpt(const nn::LoadedModel& gpt, const std::string& path, std::string text);

}  // namespace mt::app
