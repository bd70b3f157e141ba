// StateDict: the flat, serialisable form of an optimizer's or a scheduler's state, and the reader
// that loads one back strictly.
//
// A state dict is a std::map<std::string, Tensor>: tensors for per-parameter buffers, and every
// number (hyperparameters, step counts, epochs) as a 0-dim float64 tensor. That is exactly what
// save_safetensors (nn/safetensors.h) writes, so a checkpoint needs no second format:
//   save_safetensors(path, NamedTensors(sd.begin(), sd.end()));
// The key layout of optimizers is Note [Optimizer state dict] in optim/optimizer.h.
//
// What it does not do: strings, nested structures, or partial loads. Loading is all or nothing,
// and every error names the key and what was expected.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>

#include "tensor/tensor.h"

namespace mt::optim {

using StateDict = std::map<std::string, Tensor>;

namespace detail {

// A number as a state-dict entry: a 0-dim float64 CPU tensor.
Tensor scalar_entry(double value);

// Reads a state dict, remembering which keys were used, so that `check_all_used` can name the
// first key nobody asked for. `owner` ("SGD", "StepLR") starts every error message.
class StateDictReader {
 public:
  StateDictReader(const StateDict& dict, std::string owner) : dict_(dict), owner_(std::move(owner)) {}

  // Whether any key starts with `prefix` ("state.3.").
  bool has_prefix(const std::string& prefix) const;
  // The number of distinct <n> in keys "<prefix><n>.<rest>"; e.g. param groups for "param_groups.".
  size_t count_indices(const std::string& prefix) const;

  // A one-element entry as a number; throws if the key is missing or holds more than one element.
  double scalar(const std::string& key);
  // A number that must be a count equal to `expected`; `what` names it in the error.
  void expect_count(const std::string& key, size_t expected, const std::string& what);
  // A tensor entry shaped like `like`, returned as a fresh contiguous copy with like's dtype and
  // device (so the loaded state shares nothing with the dict). `what` names `like` in errors.
  Tensor tensor_like(const std::string& key, const Tensor& like, const std::string& what);

  // Throws naming a key of the dict that no read asked for.
  void check_all_used() const;

 private:
  const Tensor& at(const std::string& key);  // marks the key used; throws if it is missing
  const StateDict& dict_;
  std::string owner_;
  std::set<std::string> used_;
};

}  // namespace detail
}  // namespace mt::optim
