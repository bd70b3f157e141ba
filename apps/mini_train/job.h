// The job mini_train runs, built from its options: data (train and test splits), the model, the
// loss, the optimizer and the learning-rate schedule. Everything here is the public library
// (data/, nn/, optim/); this file only wires it up.
#pragma once

#include <memory>
#include <string>

#include "apps/mini_train/options.h"
#include "data/dataset.h"
#include "data/text.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace mt::app {

struct Data {
  std::shared_ptr<data::TensorDataset> train, test;  // test may be null (no split available)
  bool validation = false;                           // test holds --val-split's rows of the training data
  bool classification = false;
  int64_t in_features = 0, out_features = 0;  // out: classes, or target width
  std::string description;                    // for the config table
  std::string task_reason;                    // why --task auto chose the task, when not obvious
  bool standardized = false;                  // inputs were scaled: x' = (x - input_mean) / input_std
  double input_mean = 0, input_std = 1;       // the training split's, saved with the model (model_file.h)
  // --dataset text (model_gpt.h): byte windows instead of tensors; train and test above stay null.
  std::shared_ptr<data::TextWindowDataset> text_train, text_validation;
};

// Loads or generates the data the options ask for. Missing files and malformed data are errors
// naming the path.
Data load_data(const Options& opts);

// "linear:10-1", "mlp:784-512-256-10", "cnn:784-10" or gpt_signature(): what a checkpoint must match to be resumed.
std::string model_signature(const Options& opts, const Data& data);
std::shared_ptr<nn::Module> build_model(const Options& opts, const Data& data);
std::shared_ptr<nn::Loss> build_loss(const Data& data);
std::unique_ptr<optim::Optimizer> build_optimizer(const Options& opts, const nn::Module& model);
// Null for --schedule none. Cosine decays per step over the whole run.
std::unique_ptr<optim::LRScheduler> build_scheduler(const Options& opts, optim::Optimizer& opt,
                                                    int64_t total_steps);
std::string optimizer_description(const Options& opts);

}  // namespace mt::app
