// GradScaler: dynamic loss scaling for float16 training, with torch.cuda.amp.GradScaler's semantics,
// defaults and state-dict keys. The loop it belongs to:
//
//   optim::GradScaler scaler;                    // scale 2^16, x2 after 2000 clean steps, x0.5 on inf
//   scaler.scale(loss).backward();               // gradients come out multiplied by the scale
//   scaler.unscale_(opt);                        // optional: true gradients, for clipping
//   opt.clip_grad_norm(1.0);
//   scaler.step(opt);                            // unscales if not done; skips the step on inf/NaN
//   scaler.update();                             // grow or back off the scale
//
// Why scale at all, and why the skip is safe: Note [Loss scaling] in grad_scaler.cpp.
//
// Data parallel: every rank must step or skip together, or their parameters part. A scaler given a
// FoundInfReduction asks it, once per unscale_, whether any rank found an inf or NaN; the distributed
// layer provides one that all-reduces the flag (dist::any_rank_found_inf, distributed/ddp/found_inf.h).
// The gradients checked are Optimizer::step_gradients(): a sharded optimizer (ZeRO, FSDP) lists its shard's.
//
// What it does not do: scale gradients of float16 parameters (unscale_ refuses float16 gradients,
// as PyTorch does: keep float32 master weights), closures, optimizers that unscale themselves
// (PyTorch's _step_supports_amp_scaling), or anything for bfloat16, which has float32's range and
// needs no scaling.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "optim/optimizer.h"
#include "optim/state_dict.h"
#include "tensor/tensor.h"

namespace mt::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows, >= 1
  // false: scale() returns the loss, unscale_() and update() do nothing, step() is opt.step(), so one
  // loop serves float32 and float16 runs.
  bool enabled = true;
};

// Given whether this process found an inf or NaN in its gradients, returns whether any process of
// the job did. Called once per unscale_, on every rank, in the same order: it may be a collective.
using FoundInfReduction = std::function<bool(bool found_inf)>;

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss · scale, recorded in the graph, so backward produces scaled gradients. A float16 or
  // bfloat16 loss is widened to float32 first (PyTorch's scale is a float32 tensor, and the product
  // promotes). Disabled: `loss` itself.
  Tensor scale(const Tensor& loss) const;

  // Divides the gradients that `opt` will step from by the scale, in place, and records whether any
  // was inf or NaN (one pass: Note [Loss scaling]); then asks the FoundInfReduction, if any. At most
  // once per optimizer between update()s, and before step(); throws otherwise, like PyTorch.
  void unscale_(Optimizer& opt);
  // Unscales if unscale_(opt) was not called since the last update(), then runs opt.step() unless an
  // inf or NaN was found. Returns whether it stepped. Once per optimizer between update()s.
  // Disabled: opt.step(), true.
  bool step(Optimizer& opt);
  // After step() for every optimizer of this iteration: any inf found -> scale · backoff_factor and
  // the clean-step count restarts; else the count grows and, reaching growth_interval, the scale is
  // multiplied by growth_factor (unless that overflows float32) and the count restarts. Forgets the
  // optimizers' per-step state. Throws if no optimizer was unscaled since the last update().
  void update();
  // Sets the scale to new_scale (rounded to float32), forgets the per-step state, leaves the count.
  void update(double new_scale);

  // The current scale (a float32 value, as PyTorch keeps it); 1 when disabled.
  float get_scale() const { return options_.enabled ? scale_ : 1.0f; }
  int64_t growth_tracker() const { return growth_tracker_; }  // clean steps since the scale last changed
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // Installed once, before the first unscale_; an empty function removes it.
  void set_found_inf_reduction(FoundInfReduction reduce) { reduce_ = std::move(reduce); }

  // PyTorch's keys, each a 0-dim float64 (Note [Optimizer state dict]'s convention): scale,
  // growth_factor, backoff_factor, growth_interval, _growth_tracker. Every value is exact in
  // float64, so a resumed run scales bit for bit as the uninterrupted one. Empty when disabled.
  StateDict state_dict() const;
  // Loads all five (enabled is the constructor's; a disabled scaler ignores the call, and an
  // enabled one refuses an empty dict: it came from a disabled scaler). On error nothing changes.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Unscaled, Stepped };  // an optimizer not in optimizers_ is ready for unscale_
  struct PerOptimizer {
    Stage stage = Stage::Unscaled;
    bool found_inf = false;  // by this rank, or by any rank when a FoundInfReduction is set
  };

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  FoundInfReduction reduce_;
  // Keyed by address, like PyTorch's id(optimizer): an entry lives from a successful unscale_ to update().
  std::map<const Optimizer*, PerOptimizer> optimizers_;
};

namespace detail {
// Multiplies every element of `grads` by inv_scale in place; returns whether any was inf or NaN before the
// multiply (PyTorch's _amp_foreach_non_finite_check_and_unscale_); a GPU's flags read back once per call.
bool unscale_and_check(const std::vector<Tensor>& grads, float inv_scale);
// PyTorch's _amp_update_scale_ on the host: the rule of update() (see there).
void update_scale(float& scale, int64_t& growth_tracker, bool found_inf, const GradScalerOptions& o);
}  // namespace detail

}  // namespace mt::optim
