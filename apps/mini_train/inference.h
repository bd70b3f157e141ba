// Using a model file that mini_train saved, with what its metadata says (model_file.h):
//   mini_train eval --init model.safetensors [--dataset ... | --inputs x.npy --targets y.npy]
//       the test score (accuracy or mean squared error) of the saved model, on the data it was
//       trained on by default (its test split), with the training run's standardisation applied
//       (a GPT, model_gpt.h: its test loss in nats per byte on the last 10 % of the corpus it was
//       trained on, or of --text)
//   mini_train predict --init model.safetensors --inputs x.npy --output y.npy [--probabilities]
//       predictions for every row of x: class indices (int64, shape (n)) for a classifier, or with
//       --probabilities its softmax (float32, shape (n, classes), rows summing to 1); values
//       (float32, shape (n, outputs)) for a regression
// --init may also be a checkpoint, single-file or sharded: its weights, with the model file's metadata
// it carries (load_saved_model, model_file.h).
// Both load the file with nn::load_model (nn/model_file.h), as any C++ program can, and run on the
// CPU, in this process; neither trains nor changes the model file.
#pragma once

namespace mt::app {

// argv[1] is "eval" or "predict"; returns the exit code (0; 2 for a usage error). Throws
// mt::Error on bad input, like train().
int run_eval(int argc, char** argv);
int run_predict(int argc, char** argv);

}  // namespace mt::app
