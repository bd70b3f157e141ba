// Module: the base of every layer and model. A module owns named parameters (tensors an optimizer
// trains), buffers (state that is saved but not trained) and child modules, and walks them as a
// tree: named_parameters() lists dotted names in registration order ("layers.0.weight"),
// state_dict()/load_state_dict() save and restore them, train()/eval(), zero_grad() and to() apply
// to the whole tree. operator<< prints the tree like PyTorch's repr.
//
//   struct Net : nn::Module {
//     Net() { fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 256)); ... }
//     Tensor forward(const Tensor& x) override { return fc2->forward(fc1->forward(x).relu()); }
//     std::shared_ptr<nn::Linear> fc1, fc2;
//   };
//
// forward: Module declares `virtual Tensor forward(const Tensor&)`, so containers (Sequential) and
// wrappers (DDP) call any one-input module without knowing its type. libtorch instead type-erases
// forward with AnyModule; a virtual is simpler to read and costs one indirect call per layer.
// Modules that take other inputs (losses: input and target, nn/loss.h) declare their own forward,
// and Module's throws naming the module if it is called anyway.
//
// What it does not do: forward/backward hooks on modules, non-persistent buffers, copying a module
// (a module has identity: optimizers, DDP and parents hold it by pointer, so copies are deleted).
#pragma once

#include <concepts>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace mt {

// Named tensors in order: what state_dict() returns and save_safetensors() writes. The same alias as
// in nn/safetensors.h (repeating an alias is allowed), so this header needs none of the file I/O.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace mt

namespace mt::nn {

class Module;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// The keys load_state_dict(dict, /*strict=*/false) skipped (with strict = true they are errors).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict: left unchanged
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module: ignored
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- forward ----------------------------------------------------------------------------------
  // The one-input forward that Sequential and DDP call. The default throws naming the module.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // ---- registration (from a subclass's constructor) ---------------------------------------------
  // Names are non-empty, contain no '.', and are unique within this module across parameters,
  // buffers and children. Each returns a handle sharing the registered tensor (or the module), so
  // a subclass can keep it as a member: `weight = register_parameter("weight", w);`.
  //
  // A parameter must be a leaf (a tensor no op computed): it becomes one with requires_grad set as
  // asked. The tensor is registered as is, not copied.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // Buffers are saved in the state dict and moved by to(), but not trained (any dtype: counters,
  // running statistics, masks).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <std::derived_from<Module> M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- walking the tree -------------------------------------------------------------------------
  // Parents first, then children in registration order; names are dotted paths from this module.
  // A tensor registered in two places (tied weights) is listed once, under its first name, so an
  // optimizer never updates it twice. state_dict() keeps both names, like PyTorch.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const NamedModules& named_children() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const;

  // ---- modes and placement ----------------------------------------------------------------------
  // Sets the training flag of this module and every descendant. Dropout reads it.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Drops every parameter's .grad (set_to_none, PyTorch's default since 2.0: the next backward
  // allocates it fresh), or fills the existing ones with zeros, which keeps .grad tensors that are
  // views into a bigger buffer (DDP's buckets) attached to it.
  void zero_grad(bool set_to_none = true);
  // Moves (or casts) every parameter, its .grad and every buffer. The tensors keep their identity:
  // see Note [Module::to keeps parameter identity] in module.cpp. to(DType) needs a floating dtype
  // and, like PyTorch, leaves integer buffers alone. Build the optimizer after calling to().
  void to(Device device);
  void to(DType dtype);

  // ---- checkpoints ------------------------------------------------------------------------------
  // Parameters and buffers by dotted name: each module's parameters, then its buffers, then its
  // children's entries. The tensors are detached but share storage with the module (no copy; clone
  // them for a snapshot that later training does not change).
  NamedTensors state_dict() const;
  // Copies `dict`'s values into the module's tensors in place (under NoGradGuard), casting dtypes.
  // Every problem is collected first and reported in one error naming the keys; when there is one,
  // nothing is copied. Shape mismatches and repeated keys are always errors; missing and
  // unexpected keys are errors when strict, else returned. Each tensor is copied to the device of
  // the parameter or buffer it loads into (a checkpoint read on the CPU loads into a GPU model).
  LoadStateDictResult load_state_dict(const NamedTensors& dict, bool strict = true);

  // ---- printing ---------------------------------------------------------------------------------
  // The type's name, "Linear": by default the class name without its namespaces.
  virtual std::string name() const;
  // What goes between the parentheses when printing: "in_features=784, out_features=256, bias=true".
  virtual std::string extra_repr() const { return ""; }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  // Appends this module's (and, when recurse, its descendants') parameters and/or buffers to out,
  // names prefixed with `prefix`: own parameters, own buffers, then each child's, depth first.
  void collect(NamedTensors& out, const std::string& prefix, bool recurse, bool params, bool buffers) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
  bool training_ = true;
};

// Prints the module tree like PyTorch's repr:
//   Sequential(
//     (0): Linear(in_features=784, out_features=256, bias=true)
//     (1): ReLU()
//   )
std::ostream& operator<<(std::ostream& os, const Module& module);

// A number as an extra_repr shows it: the shortest form that reads back, "0.2", "1", "1e-05".
std::string repr_number(double v);

}  // namespace mt::nn
