// The model's score on a dataset: accuracy for classification, mean squared error for regression.
// Used after training (--eval), after every epoch with --eval (the validation line), and by
// `mini_train eval` (inference.h). Runs under no-grad in eval mode, in chunks of 4096 rows.
#pragma once

#include <string>

#include "apps/mini_train/progress.h"
#include "data/dataset.h"
#include "nn/module.h"
#include "tensor/device.h"

namespace mt::app {

struct Score {
  double value = 0;
  bool classification = false;
  const char* metric() const { return classification ? "accuracy" : "loss"; }  // JSON: "test_accuracy"
};

// `bar` (may be null): advanced after each chunk, rows as its steps (progress.h).
Score evaluate(nn::Module& model, const data::TensorDataset& set, bool classification, const Device& device,
               ProgressBar* bar = nullptr);

}  // namespace mt::app
