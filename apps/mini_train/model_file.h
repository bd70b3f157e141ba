// What a model file from mini_train says about itself, and how mini_train reads weights in.
//
// The final --save file is a model file (nn/model_file.h: nn::load_model rebuilds it in any C++
// program; docs/model-file.md is the format and every network's tensor names). Its safetensors
// `__metadata__` (string to string) carries everything needed to use the model elsewhere without
// the command line that trained it:
//   "format"      "minitrain-model-1" (nn::kModelFormat)
//   "model"       the model signature, "linear:10-1", "mlp:784-512-256-10" or "cnn:784-10" (its shape)
//   "task"        "classification" or "regression"; "classes" or "outputs": the output width
//   "inputs"      the input width
//   "standardize_mean", "standardize_std"   present when inputs were standardised: apply
//                 x' = (x - mean) / std before the model (17 significant digits: exact doubles)
//   "dataset"     synthetic | fashion-mnist | files | text; for synthetic also "seed", "samples", "features"
//   for --model gpt also "layers", "heads", "dim", "context", "vocab" and "text" (model_gpt.h)
// `mini_train eval`, `predict` (inference.h) and `generate` (generate.h) load it with nn::load_model;
// Python reads the metadata with json alone (tests/apps/mini_train_test.sh, case model_metadata).
// Like every file save_safetensors writes, it also carries "mt.crc32c.<tensor name>" for each
// tensor, which every load checks (Note [Tensor checksums] in nn/safetensors.cpp): a damaged model
// file is refused, naming the tensor.
//
// A checkpoint (single file or sharded, nn/checkpoint.h) also carries that metadata, each key as
// info "model_file.<key>", so load_saved_model takes a checkpoint where a model file is expected:
// eval, predict and generate use either, and `mini_train consolidate --as model` writes the model
// file a checkpoint holds.
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
#include "nn/checkpoint.h"
#include "nn/model_file.h"
#include "nn/module.h"
#include "nn/safetensors.h"

namespace mt::app {

using nn::Metadata;

// The metadata of the final model file (see above).
Metadata model_metadata(const Options& opts, const Data& data, const std::string& signature);

// Where a checkpoint keeps the model file's metadata: info keys "model_file.<key>".
inline constexpr const char* kModelFileInfo = "model_file.";

// The model file that checkpoint `c` (read from `path`) holds: its weights and metadata. A checkpoint
// without the metadata (from a mini_train before it) is one line saying so.
SafetensorsFile model_file_of(const Checkpoint& c, const std::string& path);

// nn::load_model for a model file, or for a checkpoint of either form (model_file_of).
nn::LoadedModel load_saved_model(const std::string& path);

// Loads `path` into `model` for --init: keys mapped by `prefix` ("OLD=NEW" or ""), then a strict
// load. Throws mt::Error with one line that says what to do when the names or shapes differ.
void load_init(nn::Module& model, const std::string& path, const std::string& prefix);

}  // namespace mt::app
