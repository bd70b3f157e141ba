// Learning-rate schedulers: set each param group's lr from its initial lr and an epoch counter, the
// way torch.optim.lr_scheduler does. Made after the optimizer, stepped after optimizer.step():
//
//   optim::AdamW opt(model.parameters(), {.lr = 1e-3});
//   optim::LinearLR warmup(opt, {.start_factor = 0.1, .total_iters = 5});
//   optim::CosineAnnealingLR cosine(opt, {.t_max = 95});
//   optim::SequentialLR sched(opt, {warmup, cosine}, {5});  // 5 warm-up epochs, then cosine
//   for (epoch...) { train(); sched.step(); }
//
// Each scheduler is a Schedule, a pure function lr(base_lr, t), in the closed form PyTorch documents.
// Note [Closed form]: PyTorch's step() updates the lr recursively from the previous one (so that
// schedulers can be stacked); for the schedules here that equals the closed form up to rounding
// (the tests compare against PyTorch's sequences). The closed form needs no history, so resuming
// from a state dict (last_epoch and base lrs) is exact, and SequentialLR just picks a function.
//
// Like PyTorch, a scheduler applies epoch 0 when it is made (last_epoch = 0 afterwards), and each
// step() moves to the next epoch. What it does not do: ReduceLROnPlateau, OneCycleLR, cyclic and
// restart schedules, momentum schedules, or stacking two schedulers that both act every step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "optim/optimizer.h"

namespace mt::optim {

// The lr at epoch t (t >= 0) of a group whose initial lr is base_lr.
using Schedule = std::function<double(double base_lr, int64_t t)>;

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Moves to the next epoch and sets every group's lr to schedule(base_lr, last_epoch).
  void step();
  // The lrs the last step (or the constructor) set, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  // The groups' initial lrs: their lr when the scheduler was made.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const Schedule& schedule() const { return schedule_; }
  const Optimizer& optimizer() const { return optimizer_; }

  // {"last_epoch", "base_lrs.<g>"} as 0-dim float64 tensors (optim/state_dict.h). Loading restores
  // them and sets the optimizer's lrs for that epoch.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  // `name` starts error messages. base_lrs default to the optimizer's current lrs.
  LRScheduler(const char* name, Optimizer& optimizer, Schedule schedule, std::vector<double> base_lrs = {});

 private:
  void apply();

  const char* name_;
  Optimizer& optimizer_;
  Schedule schedule_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

// lr = base_lr · factor(t): any schedule as a multiplier (torch's LambdaLR).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t t)> factor);
};

struct StepLROptions {
  int64_t step_size = 0;  // required: epochs between decays
  double gamma = 0.1;
};
// lr = base_lr · γ^⌊t / step_size⌋
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, const StepLROptions& options);
};

struct CosineAnnealingLROptions {
  int64_t t_max = 0;     // required: epochs of one half cosine (PyTorch's T_max)
  double eta_min = 0.0;  // the lr at t = t_max
};
// lr = eta_min + (base_lr − eta_min)·(1 + cos(π·t / t_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, const CosineAnnealingLROptions& options);
};

struct LinearLROptions {
  double start_factor = 1.0 / 3;
  double end_factor = 1.0;
  int64_t total_iters = 5;
};
// lr = base_lr · (start + (end − start)·min(t, total_iters) / total_iters): linear warm-up (or decay)
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, const LinearLROptions& options);
};

// Runs schedulers one after another: schedulers[k] from epoch milestones[k-1] on, restarted at its
// own epoch 0 there (torch's SequentialLR). All must belong to `optimizer`; the initial lrs are the
// first scheduler's (the later ones were made after it had already changed the lr). The
// schedulers' schedules are copied, so they need not outlive this one.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, const std::vector<std::reference_wrapper<const LRScheduler>>& schedulers,
               const std::vector<int64_t>& milestones);
};

}  // namespace mt::optim
