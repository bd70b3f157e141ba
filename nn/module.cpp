// Module: registration, the recursive walks (named parameters, state dict), modes, to() and
// printing. The layers themselves live in their own files (linear.cpp, activation.cpp, ...).
#include "nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/raw_ops.h"

namespace mt::nn {

// ---- forward ------------------------------------------------------------------------------------

Tensor Module::forward(const Tensor& input) {
  MT_FAIL(name(), " has no forward(const Tensor&): override it so the module can be called with one "
          "input (operator(), Sequential); modules with other inputs, like losses, declare their own");
}

// ---- registration -------------------------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* what) const {
  MT_CHECK(!name.empty(), this->name(), ".", what, ": the name must not be empty");
  MT_CHECK(name.find('.') == std::string::npos, this->name(), ".", what, ": name '", name,
           "' must not contain '.' (dots separate the levels of dotted names like layers.0.weight)");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  MT_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), this->name(), ".", what,
           ": '", name, "' is already registered as a parameter, buffer or child of this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  MT_CHECK(tensor.defined(), this->name(), ".register_parameter: '", name, "' is an undefined tensor");
  MT_CHECK(tensor.is_leaf(), this->name(), ".register_parameter: '", name, "' was computed by ",
           tensor.grad_fn()->name(), "; a parameter must be a leaf (register x.detach())");
  MT_CHECK(!requires_grad || is_floating(tensor.dtype()), this->name(), ".register_parameter: '", name,
           "' is ", tensor.dtype(), "; a parameter that requires grad must be floating-point");
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "register_buffer");
  MT_CHECK(tensor.defined(), this->name(), ".register_buffer: '", name, "' is an undefined tensor");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name, "register_module");
  MT_CHECK(child != nullptr, this->name(), ".register_module: '", name, "' is a null module");
  MT_CHECK(child.get() != this, this->name(), ".register_module: '", name, "' is the module itself");
  children_.emplace_back(name, std::move(child));
}

// ---- walking the tree ---------------------------------------------------------------------------

void Module::collect(NamedTensors& out, const std::string& prefix, bool recurse, bool params,
                     bool buffers) const {
  if (params)
    for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  if (buffers)
    for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(out, prefix + name + ".", true, params, buffers);
}

namespace {

// Keeps the first entry of each tensor (by identity): a tied weight is listed once.
NamedTensors unique(NamedTensors all) {
  std::unordered_set<const TensorImpl*> seen;
  NamedTensors out;
  out.reserve(all.size());
  for (auto& entry : all)
    if (seen.insert(entry.second.unsafe_impl()).second) out.push_back(std::move(entry));
  return out;
}

std::vector<Tensor> values(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& entry : named) out.push_back(entry.second);
  return out;
}

}  // namespace

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all;
  collect(all, "", recurse, /*params=*/true, /*buffers=*/false);
  return unique(std::move(all));
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors all;
  collect(all, "", recurse, /*params=*/false, /*buffers=*/true);
  return unique(std::move(all));
}

std::vector<Tensor> Module::parameters(bool recurse) const { return values(named_parameters(recurse)); }
std::vector<Tensor> Module::buffers(bool recurse) const { return values(named_buffers(recurse)); }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  out.reserve(children_.size());
  for (const auto& entry : children_) out.push_back(entry.second);
  return out;
}

namespace {
void collect_modules(NamedModules& out, std::unordered_set<const Module*>& seen, const Module& m,
                     const std::string& prefix) {
  for (const auto& [name, child] : m.named_children()) {
    if (!seen.insert(child.get()).second) continue;
    out.emplace_back(prefix + name, child);
    collect_modules(out, seen, *child, prefix + name + ".");
  }
}
}  // namespace

NamedModules Module::named_modules() const {
  // Shared ownership when a shared_ptr holds this module; otherwise the aliasing constructor with an
  // empty owner gives a pointer that owns nothing (a module on the stack).
  std::shared_ptr<Module> self = std::const_pointer_cast<Module>(weak_from_this().lock());
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this));
  NamedModules out{{"", self}};
  std::unordered_set<const Module*> seen{this};
  collect_modules(out, seen, *this, "");
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& entry : named_modules()) out.push_back(std::move(entry.second));
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& entry : children_) entry.second->apply(fn);
  fn(*this);
  return *this;
}

// ---- modes and placement ------------------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (const auto& entry : children_) entry.second->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      g.zero_();
    }
  }
}

// Note [Module::to keeps parameter identity]
// Optimizers, DDP and subclass members (Linear::weight) hold handles to the parameter tensors, made
// when the module was built. If to() registered new tensors, those handles would go on training the
// old ones, silently. So to() swaps the data *under* each existing handle, as libtorch's set_data
// and PyTorch's `param.data = ...` do: the TensorImpl gets the new storage, strides and dtype and
// keeps its autograd metadata (requires_grad, hooks). A .grad is converted too. Its AccumulateGrad
// node is forgotten when the dtype or device changes, as PyTorch's set_data does: the node expects
// gradients of the old kind (Note [A gradient matches its tensor]), so the next graph makes a new
// one. What is not converted: graphs recorded before to() (their backward fails: a node that saved
// the parameter refuses its new data (Note [What a saved tensor holds], autograd/node.cpp), and
// AccumulateGrad a gradient of the old kind) and optimizer state
// built before it (momentum buffers), so call to() before making the optimizer, as in PyTorch.

namespace {

void set_data(const Tensor& t, const Tensor& data) {
  if (data.is_same(t)) return;
  const bool same_kind = data.dtype() == t.dtype() && data.device() == t.device();
  TensorImpl& dst = *t.unsafe_impl();
  const TensorImpl& src = *data.unsafe_impl();
  dst.storage = src.storage;
  dst.sizes = src.sizes;
  dst.strides = src.strides;
  dst.offset = src.offset;
  dst.dtype = src.dtype;
  if (AutogradMeta* m = mt::detail::autograd_meta_or_null(t); m && !same_kind) m->grad_accumulator.reset();
}

void convert(const Tensor& t, const std::function<Tensor(const Tensor&)>& fn) {
  set_data(t, fn(t));
  if (const Tensor g = t.grad(); g.defined()) t.set_grad(fn(g));
}

}  // namespace

void Module::to(Device device) {
  auto move = [&](const Tensor& t) { return raw::to_device(t, device); };
  for (const Tensor& p : parameters()) convert(p, move);
  for (const Tensor& b : buffers()) convert(b, move);
}

void Module::to(DType dtype) {
  MT_CHECK(is_floating(dtype), name(), ".to: parameters must stay floating-point, asked for ", dtype);
  auto cast = [&](const Tensor& t) { return raw::cast(t, dtype); };
  for (const Tensor& p : parameters()) convert(p, cast);
  for (const Tensor& b : buffers())
    if (is_floating(b.dtype())) convert(b, cast);
}

// ---- checkpoints --------------------------------------------------------------------------------

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect(out, "", /*recurse=*/true, /*params=*/true, /*buffers=*/true);
  for (auto& entry : out) entry.second = entry.second.detach();
  return out;
}

namespace {

void list_keys(std::ostream& os, const char* what, const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  os << "\n  " << what << ": ";
  for (size_t i = 0; i < keys.size(); ++i) os << (i ? ", " : "") << '"' << keys[i] << '"';
}

}  // namespace

LoadStateDictResult Module::load_state_dict(const NamedTensors& dict, bool strict) {
  NamedTensors own;
  collect(own, "", /*recurse=*/true, /*params=*/true, /*buffers=*/true);
  std::unordered_map<std::string, Tensor> by_name(own.begin(), own.end());

  // Check everything before copying anything, so a bad checkpoint leaves the module as it was.
  LoadStateDictResult result;
  std::vector<std::string> repeated, mis_shaped;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  std::unordered_set<std::string> seen;
  for (const auto& [key, src] : dict) {
    if (!seen.insert(key).second) {
      repeated.push_back(key);
      continue;
    }
    auto it = by_name.find(key);
    if (it == by_name.end()) {
      result.unexpected_keys.push_back(key);
      continue;
    }
    const Tensor& dst = it->second;
    if (!src.defined() || src.sizes() != dst.sizes()) {
      std::ostringstream os;
      os << '"' << key << "\": the checkpoint has " << (src.defined() ? src.sizes().str() : "an undefined tensor")
         << ", the module has " << dst.sizes();
      mis_shaped.push_back(os.str());
      continue;
    }
    copies.emplace_back(dst, src);
  }
  for (const auto& entry : own)
    if (!seen.count(entry.first)) result.missing_keys.push_back(entry.first);

  const bool key_errors = strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (key_errors || !repeated.empty() || !mis_shaped.empty()) {
    std::ostringstream os;
    os << "load_state_dict: error(s) loading a state dict into " << name() << "; nothing was loaded:";
    if (strict) {
      list_keys(os, "missing keys", result.missing_keys);
      list_keys(os, "unexpected keys", result.unexpected_keys);
    }
    list_keys(os, "keys given more than once", repeated);
    for (const std::string& m : mis_shaped) os << "\n  size mismatch for " << m;
    if (strict && key_errors) os << "\n  (load_state_dict(dict, /*strict=*/false) skips missing and unexpected keys)";
    MT_FAIL(os.str());
  }

  NoGradGuard no_grad;
  // A dict read from a file is on the CPU, the module may be on a GPU: each tensor is cast to its
  // destination's dtype (a bfloat16 file into float32 parameters) on the CPU, then copied to its
  // device (each a no-op when it already matches).
  for (auto& [dst, src] : copies) dst.copy_(src.to(dst.dtype()).to(dst.device()));
  return result;
}

// ---- printing -----------------------------------------------------------------------------------

std::string Module::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                   std::free);
  const std::string full = status == 0 && demangled ? demangled.get() : mangled;
  // Like PyTorch's type(self).__name__: drop the namespaces ("mt::nn::Linear" -> "Linear",
  // "(anonymous namespace)::Net" -> "Net"), but not those inside template arguments.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    const char c = full[i];
    if (c == '<' || c == '(') ++depth;
    else if (c == '>' || c == ')') --depth;
    else if (depth == 0 && c == ':' && i + 1 < full.size() && full[i + 1] == ':') start = i + 2;
  }
  return full.substr(start);
}

namespace {

// PyTorch's repr: "Name(extra)" for a leaf; for a module with children, one line per child,
// indented two spaces per level.
void print(std::ostream& os, const Module& m, int indent) {
  os << m.name() << '(';
  const std::string extra = m.extra_repr();
  if (m.named_children().empty()) {
    os << extra << ')';
    return;
  }
  const std::string pad(indent + 2, ' ');
  os << '\n';
  if (!extra.empty()) os << pad << extra << '\n';
  for (const auto& [name, child] : m.named_children()) {
    os << pad << '(' << name << "): ";
    print(os, *child, indent + 2);
    os << '\n';
  }
  os << std::string(indent, ' ') << ')';
}

}  // namespace

std::string repr_number(double v) {
  std::ostringstream os;
  os << std::setprecision(std::numeric_limits<double>::max_digits10) << v;
  std::ostringstream shortest;
  shortest << v;  // 6 significant digits: used when it reads back as the same double
  return std::stod(shortest.str()) == v ? shortest.str() : os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  print(os, module, 0);
  return os;
}

}  // namespace mt::nn
