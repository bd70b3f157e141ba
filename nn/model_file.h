// Model files: safetensors files whose `__metadata__` says which network the tensors belong to and
// how its inputs were prepared, so that one call gives back a network ready to use. mini_train's
// --save writes them (apps/mini_train/model_file.h); docs/model-file.md describes the format, every
// network's tensor names and shapes, and how to read one from Python.
//
//   mt::nn::LoadedModel m = mt::nn::load_model("final_model.safetensors");
//   mt::NoGradGuard no_grad;
//   mt::Tensor logits = m.forward(x);        // x: (N, inputs) rows, or (N, 28, 28) images: any float
//                                            // dtype; flattened and standardised as in training
//   mt::Tensor p = m.probabilities(x);       // a classifier's softmax: (N, classes), rows sum to 1
//   mt::Tensor next = m.forward(tokens);     // a GPT: (B, T) int64 bytes -> logits (B, T, 256)
//
// What it does not do: files of networks other than those of nn/networks.h and nn::GPT; loading
// onto a GPU (the module is on the CPU: call module->to(device)); renaming tensors (mini_train's
// --init-prefix does that for weights from elsewhere).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/safetensors.h"
#include "nn/transformer.h"

namespace mt::nn {

inline constexpr const char* kModelFormat = "minitrain-model-1";  // metadata "format"

using Metadata = std::map<std::string, std::string>;

// What a model file's metadata says, checked.
struct ModelInfo {
  std::string signature;          // "mlp:784-512-256-10", "cnn:784-10", "linear:10-1", "gpt:layers4-heads4-dim128-context64"
  std::string kind;               // linear | mlp | cnn | gpt
  std::vector<int64_t> hidden;    // mlp widths
  int64_t in_features = 0;        // values per input row (gpt: the context, in bytes)
  int64_t out_features = 0;       // classes or outputs (gpt: 256)
  bool classification = false;    // the output is one score per class
  bool standardized = false;      // inputs go through x' = (x - mean) / std first
  double mean = 0, std = 1;
  GPTOptions gpt;                 // kind gpt: its shape
  Metadata metadata;              // all of it (the training data's description, ...)
};

// Reads and checks the metadata of the model file at `path` (named in errors): one line saying what
// is missing or wrong when it is not a model file.
ModelInfo read_model_info(const Metadata& metadata, const std::string& path);

// metadata[key] as a whole number >= min; an error names the file and the key otherwise.
int64_t metadata_count(const Metadata& metadata, const std::string& key, const std::string& path, int64_t min);

// x' = (x - mean) / std, elementwise (x: any float32 tensor). The one formula training and loading
// both use, so a reloaded model sees bit-identical inputs.
Tensor standardize_with(const Tensor& x, double mean, double std);

// A network rebuilt from its file, with its weights, in eval mode, and its input preparation.
struct LoadedModel {
  ModelInfo info;
  std::shared_ptr<Module> module;  // the network alone: its state_dict() names are the file's

  // What the network saw in training: rows flattened to (N, in_features) float32 and standardised
  // when the file says so (a 1-dim x is N rows of one value); a GPT's (B, T) or (T) int64 bytes,
  // T <= context. A wrong width or dtype is one line naming the model's.
  Tensor prepare(const Tensor& x) const;
  // module->forward(prepare(x)): logits (N, classes), values (N, outputs), or a GPT's (B, T, 256).
  Tensor forward(const Tensor& x) const;
  // softmax(forward(x)) over the last dim; classifiers (and GPTs) only.
  Tensor probabilities(const Tensor& x) const;
};

// Loads the model file at `path`: its metadata (read_model_info), the network it names, the weights.
// Throws one line naming the file when it is not a model file, or its tensors are not the network's.
LoadedModel load_model(const std::string& path);
// The same for a file already read from `path`.
LoadedModel load_model(const SafetensorsFile& file, const std::string& path);

}  // namespace mt::nn
