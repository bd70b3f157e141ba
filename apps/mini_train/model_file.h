// What a model file from mini_train says about itself, and how mini_train reads weights in.
//
// The final --save file carries, in its safetensors `__metadata__` (string to string), everything
// needed to use the model elsewhere without the command line that trained it:
//   "format"      "minitrain-model-1"
//   "model"       the model signature, "linear:10-1", "mlp:784-512-256-10" or "cnn:784-10" (its shape)
//   "task"        "classification" or "regression"; "classes" or "outputs": the output width
//   "inputs"      the input width
//   "standardize_mean", "standardize_std"   present when inputs were standardised: apply
//                 x' = (x - mean) / std before the model (17 significant digits: exact doubles)
//   "dataset"     synthetic | fashion-mnist | files | text; for synthetic also "seed", "samples", "features"
//   for --model gpt also "layers", "heads", "dim", "context", "vocab" and "text" (model_gpt.h), which
//                 `mini_train generate` (generate.h) rebuilds the model from
// `mini_train eval` and `mini_train predict` (inference.h) read these back; Python reads them with
// json alone (tests/apps/mini_train_test.sh, case model_metadata). Like every file save_safetensors
// writes, it also carries "mt.crc32c.<tensor name>" for each tensor, which every load checks (Note
// [Tensor checksums] in nn/safetensors.cpp): a damaged model file is refused, naming the tensor.
//
// --init PATH loads weights strictly, after an optional key mapping --init-prefix OLD=NEW (a name
// starting with OLD has it replaced by NEW; OLD may be empty), so that a PyTorch nn.Linear's
// "weight"/"bias" (--init-prefix =0.) or a module attribute's "net.weight" (--init-prefix net.=0.)
// loads into mini_train's Sequential ("0.weight"). A mismatch is one line listing both sides and,
// where one exists, the --init-prefix that would make them match.
#pragma once

#include <map>
#include <string>

#include "apps/mini_train/job.h"
#include "apps/mini_train/options.h"
#include "nn/module.h"
#include "nn/safetensors.h"

namespace mt::app {

using Metadata = std::map<std::string, std::string>;

// The metadata of the final model file (see above).
Metadata model_metadata(const Options& opts, const Data& data, const std::string& signature);

// What a model file's metadata says, checked: an error names the file when it is not mini_train's.
struct ModelInfo {
  std::string signature, model;      // "mlp:10-16-1", "mlp"
  std::vector<int64_t> hidden;       // mlp widths
  int64_t in_features = 0, out_features = 0;
  bool classification = false;
  bool standardized = false;
  double mean = 0, std = 1;
  Metadata metadata;                 // all of it, for dataset details
};
ModelInfo read_model_info(const Metadata& metadata, const std::string& path);
// metadata[key] as a whole number >= min; an error names the file and the key otherwise.
int64_t metadata_count(const Metadata& metadata, const std::string& key, const std::string& path, int64_t min);

// x' = (x - mean) / std, elementwise (x: any float32 tensor). The one formula training and
// inference both use, so a reloaded model sees bit-identical inputs.
Tensor standardize_with(const Tensor& x, double mean, double std);

// Loads `path` into `model` for --init: keys mapped by `prefix` ("OLD=NEW" or ""), then a strict
// load. Throws mt::Error with one line that says what to do when the names or shapes differ.
void load_init(nn::Module& model, const std::string& path, const std::string& prefix);
// The same for tensors already read from `path` (named in errors).
void load_weights(nn::Module& model, const NamedTensors& tensors, const std::string& path, const std::string& prefix);

}  // namespace mt::app
