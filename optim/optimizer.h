// Optimizer: the base of SGD, Adam and AdamW. It holds the parameters in groups, each group with its
// own hyperparameters (lr, weight_decay, ...), and per-parameter state (momentum buffers, moment
// estimates); it zeroes gradients and turns all of that into a flat state dict for checkpoints.
//
// Two layers:
//   Optimizer                       what a training loop, a scheduler or a checkpoint needs, whatever
//                                   the algorithm: step, zero_grad, lr per group, state dicts.
//   OptimizerBase<Options, State>   the bookkeeping shared by every algorithm: groups of (params,
//                                   Options), one State per parameter, state dicts built from the
//                                   fields that Options and State list. SGD and Adam derive from it
//                                   and only write their update.
//
// What it does not do: closures for step (L-BFGS), sparse gradients, or torch.optim's
// maximize/foreach/capturable/differentiable flags.
//
// Note [Optimizer state dict]: the state is flat (optim/state_dict.h), keyed like torch.optim's:
//   param_groups.<g>.<hyperparameter>   0-dim float64; bools as 0/1 (lr, momentum, beta1, ...)
//   param_groups.<g>.num_params         0-dim float64: the group's parameter count, checked on load
//   state.<i>.<field>                   parameter i's buffer (momentum_buffer, exp_avg, ...), shaped
//                                       like the parameter, or a 0-dim float64 (step)
// Parameters are numbered across groups in order: group 0's first parameter is 0. A parameter that
// was never updated has no state.<i> entries, like PyTorch. Loading also restores the hyperparameters
// (a scheduler's last lr included), checks that group and parameter counts and shapes match, and
// names the key that is missing, unexpected or mis-shaped; on any error nothing is changed.
//
// Note [Options are aggregates]: every options struct (AdamOptions, SGDOptions, nn::LinearOptions,
// dist::DDPOptions, ...) is a plain struct set with C++20 designated initialisers,
// `{.lr = 3e-4, .betas = {0.9, 0.95}}`: one line names each setting given, the others keep the
// defaults written beside their fields, and a misspelt name does not compile. libtorch's chained
// setters, `AdamOptions().lr(3e-4).betas(...)`, cannot live beside that: a struct cannot have a
// field and a method of one name, and designated initialisers need the fields. Making every field a
// callable wrapper, only so that `.lr(...)` could fail with a message of ours, would put that
// wrapper in every read of every setting; so the compiler's own error stands ("expression cannot be
// used as a function") and the README shows the two forms side by side. libtorch's one-argument
// form does work: `AdamOptions(3e-4)`, `SGDOptions(0.1)` are C++20's parenthesised aggregate
// initialisation of the first field, which is lr in every optimizer's options.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "optim/state_dict.h"
#include "tensor/tensor.h"

namespace mt::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient. Runs under NoGradGuard; parameters whose
  // grad() is undefined are skipped and their state is left as it was (exactly like torch.optim).
  virtual void step() = 0;
  // Forgets the gradients (set_to_none, PyTorch's default: the next backward allocates fresh ones)
  // or fills them with zeros in place (keeps the memory, e.g. gradients that are views of a buffer).
  void zero_grad(bool set_to_none = true);

  virtual size_t num_param_groups() const = 0;
  virtual const std::vector<Tensor>& params(size_t group) const = 0;
  // Every parameter, group after group: the numbering of state.<i> keys.
  std::vector<Tensor> parameters() const;
  // The learning rate of a group: what schedulers read and write.
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;

  // Scales the gradients of this optimizer's parameters to a joint 2-norm of at most max_norm, as
  // clip_grad_norm_(parameters(), max_norm) does (optim/clip_grad.h), and returns the norm before
  // clipping. An optimizer whose gradients are split across ranks overrides it: ZeRO's sums its
  // shards' squares over the ranks (distributed/zero/zero.h), a collective. So a training loop
  // clips through its optimizer and need not know which kind it holds.
  virtual double clip_grad_norm(double max_norm);
  // The gradients step() will read: the defined grad() of parameters(), group after group. An
  // optimizer that steps from other tensors overrides it (ZeRO: its shard's), so a GradScaler
  // (optim/grad_scaler.h) unscales and checks exactly what the step uses.
  virtual std::vector<Tensor> step_gradients() const;

  // Note [Optimizer state dict]. The tensors are copies: a snapshot, unaffected by later steps.
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;

 protected:
  Optimizer() = default;
};

namespace detail {
// Checks a new group's parameters: defined, floating-point leaves, none already in `existing` and
// none twice. `optimizer` and `group` name the culprit in errors.
void check_new_params(const char* optimizer, size_t group, const std::vector<Tensor>& params,
                      const std::vector<Tensor>& existing);
// Whether an update can run as one loop over raw pointers: p is a contiguous CPU float32/float64
// tensor and every defined tensor of `others` (gradient, state buffers) is contiguous, on the CPU,
// of p's dtype. Undefined tensors (a buffer not made yet) do not count.
bool fusable_param(const Tensor& p);
bool fusable_with(const Tensor& p, const Tensor& other);
template <typename... Others>
bool fusable(const Tensor& p, const Others&... others) {
  return fusable_param(p) && (fusable_with(p, others) && ...);
}
// "param_groups.<g>." and "state.<i>."
std::string group_prefix(size_t group);
std::string state_prefix(size_t param);
}  // namespace detail

// Options: an aggregate of hyperparameters with `lr`, `static constexpr const char* kName`,
//   `void check(size_t group) const` (throws naming the bad option) and
//   `template <typename Self, typename F> static void fields(Self& o, F&& f)` calling f(name, field)
//   for each hyperparameter (double or bool).
// State: one parameter's state with `bool empty() const` (never updated) and
//   `template <typename Self, typename F> static void fields(Self& s, const Options& o, F&& f)`
//   calling f(name, field) for each field (Tensor or double) that the group's options need.
template <typename Options, typename State>
class OptimizerBase : public Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor> params;
    Options options;
  };

  // A new group with the constructor's options, or with its own. Missing fields of a designated
  // initialiser take the struct's defaults, not the constructor's: start from defaults() to change
  // one option, e.g. `auto o = opt.defaults(); o.lr = 0.1; opt.add_param_group(head, o);`.
  void add_param_group(std::vector<Tensor> params) { add_param_group(std::move(params), defaults_); }
  void add_param_group(std::vector<Tensor> params, const Options& options) {
    options.check(groups_.size());
    detail::check_new_params(Options::kName, groups_.size(), params, parameters());
    state_.resize(state_.size() + params.size());
    groups_.push_back({std::move(params), options});
  }

  const Options& defaults() const { return defaults_; }
  const Options& options(size_t group) const { return group_at(group).options; }
  void set_options(size_t group, const Options& options) {
    group_at(group);  // throws for a group that does not exist
    options.check(group);
    groups_[group].options = options;
  }

  size_t num_param_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const override { return group_at(group).params; }
  double lr(size_t group) const override { return group_at(group).options.lr; }
  void set_lr(size_t group, double lr) override {
    Options o = options(group);
    o.lr = lr;
    set_options(group, o);
  }

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  OptimizerBase(std::vector<Tensor> params, const Options& defaults) : defaults_(defaults) {
    MT_CHECK(!params.empty(), Options::kName, ": got an empty parameter list");
    add_param_group(std::move(params));
  }

  // Calls update(param, grad, state, group options) for every parameter that has a gradient,
  // under NoGradGuard: the update's in-place ops must not be recorded.
  template <typename Update>
  void for_each_param_with_grad(Update&& update) {
    NoGradGuard no_grad;
    size_t i = 0;
    for (const ParamGroup& group : groups_) {
      for (const Tensor& p : group.params) {
        State& state = state_[i++];
        const Tensor g = p.grad();
        if (g.defined()) update(p, g, state, group.options);
      }
    }
  }

 private:
  const ParamGroup& group_at(size_t group) const {
    MT_CHECK(group < groups_.size(), Options::kName, ": no param group ", group, " (there are ",
             groups_.size(), ")");
    return groups_[group];
  }

  std::vector<ParamGroup> groups_;
  std::vector<State> state_;  // one per parameter, numbered across groups in order
  Options defaults_;
};

template <typename Options, typename State>
StateDict OptimizerBase<Options, State>::state_dict() const {
  StateDict out;
  size_t i = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const std::string gp = detail::group_prefix(g);
    out[gp + "num_params"] = detail::scalar_entry(static_cast<double>(group.params.size()));
    Options::fields(group.options, [&](const char* name, const auto& value) {
      out[gp + name] = detail::scalar_entry(static_cast<double>(value));
    });
    for (size_t k = 0; k < group.params.size(); ++k, ++i) {
      if (state_[i].empty()) continue;
      const std::string sp = detail::state_prefix(i);
      State::fields(state_[i], group.options, [&](const char* name, const auto& value) {
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, Tensor>) {
          if (value.defined()) out[sp + name] = value.clone();
        } else {
          out[sp + name] = detail::scalar_entry(static_cast<double>(value));
        }
      });
    }
  }
  return out;
}

template <typename Options, typename State>
void OptimizerBase<Options, State>::load_state_dict(const StateDict& dict) {
  detail::StateDictReader reader(dict, Options::kName);
  const size_t num_groups = reader.count_indices("param_groups.");
  MT_CHECK(num_groups == groups_.size(), Options::kName, ": load_state_dict: the state dict has ",
           num_groups, " param groups, this optimizer has ", groups_.size());
  // Build the new groups and state aside and swap them in at the end: a failed load changes nothing.
  std::vector<ParamGroup> groups = groups_;
  std::vector<State> state(state_.size());
  size_t i = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string gp = detail::group_prefix(g);
    reader.expect_count(gp + "num_params", groups[g].params.size(),
                        "param group " + std::to_string(g) + "'s parameter count");
    Options::fields(groups[g].options, [&](const char* name, auto& value) {
      value = static_cast<std::decay_t<decltype(value)>>(reader.scalar(gp + name));
    });
    groups[g].options.check(g);
    for (const Tensor& p : groups[g].params) {
      const std::string sp = detail::state_prefix(i);
      if (reader.has_prefix(sp)) {
        State::fields(state[i], groups[g].options, [&](const char* name, auto& value) {
          if constexpr (std::is_same_v<std::decay_t<decltype(value)>, Tensor>) {
            value = reader.tensor_like(sp + name, p, "parameter " + std::to_string(i));
          } else {
            value = reader.scalar(sp + name);
          }
        });
      }
      ++i;
    }
  }
  reader.check_all_used();
  groups_ = std::move(groups);
  state_ = std::move(state);
}

}  // namespace mt::optim
