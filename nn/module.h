// Module: the base of every layer and model. A module owns named parameters (tensors an optimizer
// trains), buffers (state that is saved but not trained) and child modules, and walks them as a
// tree: named_parameters() lists dotted names in registration order ("layers.0.weight"),
// state_dict()/load_state_dict() save and restore them, train()/eval(), zero_grad() and to() apply
// to the whole tree. operator<< prints the tree like PyTorch's repr. named_modules() and apply(fn)
// visit every module of the tree; forward hooks run around forward when a module is called.
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
// Note [Hooks run in operator()]: as in PyTorch, where hooks run in Module.__call__, a module's
// forward pre-hooks and forward hooks run when it is called, `module(x)`, and not when forward(x) is
// called directly: forward stays the plain computation a subclass writes. The library's containers
// and models (Sequential, DistributedDataParallel, TransformerBlock, GPT) call their children that
// way, so hooks on any module inside them run; a model's own forward should call its children as
// `(*fc1)(x)` for the same.
//
// What it does not do: backward hooks on modules (tensors have post-accumulate-grad hooks),
// non-persistent buffers, copying a module (a module has identity: optimizers, DDP and parents hold
// it by pointer, so copies are deleted).
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
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

struct ModuleHooks;  // module.cpp: a module's hook lists, shared with the handles that remove them

// What register_forward_hook and register_forward_pre_hook return: remove() takes the hook off its
// module again, as PyTorch's RemovableHandle. Dropping the handle keeps the hook; remove() is safe to
// call twice and after the module is gone.
class HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Module;
  HookHandle(std::weak_ptr<ModuleHooks> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
  std::weak_ptr<ModuleHooks> hooks_;
  uint64_t id_ = 0;
};

// The keys load_state_dict(dict, /*strict=*/false) skipped (with strict = true they are errors).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict: left unchanged
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module: ignored
};

// enable_shared_from_this lets named_modules() list a module that lives in a shared_ptr under its
// own name "" with shared ownership, as it lists its children.
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- forward ----------------------------------------------------------------------------------
  // The one-input computation, which containers and DDP reach through operator(). The default
  // throws naming the module.
  virtual Tensor forward(const Tensor& input);
  // forward with the hooks around it (Note [Hooks run in operator()]); without hooks, just forward.
  Tensor operator()(const Tensor& input) { return hooks_ ? call_with_hooks(input) : forward(input); }
  // Whether a forward hook or pre-hook was ever registered (a removed one's list may stay, empty):
  // a container that fuses a module's forward with its neighbours' (Note [Fused runs in Sequential])
  // calls a module with hooks by itself instead.
  bool has_hooks() const { return hooks_ != nullptr; }

  // ---- hooks (PyTorch's register_forward_pre_hook / register_forward_hook) ----------------------
  // A pre-hook sees the input before forward and may return a replacement for it; a forward hook
  // sees the input (as forward got it) and the output, and may return a replacement output.
  // std::nullopt keeps the value. Hooks run in registration order, each seeing what the one before
  // it returned.
  using ForwardPreHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
  using ForwardHook =
      std::function<std::optional<Tensor>(Module& module, const Tensor& input, const Tensor& output)>;
  HookHandle register_forward_pre_hook(ForwardPreHook hook);
  HookHandle register_forward_hook(ForwardHook hook);

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
  // This module, named "", then every descendant, depth first in registration order, named by its
  // dotted path ("layers.0"); a module registered in two places is listed once, under its first name
  // (PyTorch's named_modules). The first entry shares ownership of this module when a shared_ptr
  // holds it; for a module that lives elsewhere (on the stack) it points at it without owning it.
  NamedModules named_modules() const;
  std::vector<std::shared_ptr<Module>> modules() const;
  // Calls fn on every child's subtree (each child's apply), then on this module, as PyTorch's
  // apply: `net.apply([](nn::Module& m) { if (auto* l = dynamic_cast<nn::Linear*>(&m)) ... });`.
  Module& apply(const std::function<void(Module&)>& fn);

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
  Tensor call_with_hooks(const Tensor& input);
  void check_new_name(const std::string& name, const char* what) const;
  // Appends this module's (and, when recurse, its descendants') parameters and/or buffers to out,
  // names prefixed with `prefix`: own parameters, own buffers, then each child's, depth first.
  void collect(NamedTensors& out, const std::string& prefix, bool recurse, bool params, bool buffers) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
  bool training_ = true;
  std::shared_ptr<ModuleHooks> hooks_;  // null until a hook is registered: operator() tests only this
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
