// The schedulers of lr_scheduler.h: each constructor checks its options and hands the base class
// its closed-form Schedule; the base class owns the epoch counter and writes the lrs.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mt::optim {

LRScheduler::LRScheduler(const char* name, Optimizer& optimizer, Schedule schedule, std::vector<double> base_lrs)
    : name_(name), optimizer_(optimizer), schedule_(std::move(schedule)), base_lrs_(std::move(base_lrs)) {
  if (base_lrs_.empty()) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) base_lrs_.push_back(optimizer_.lr(g));
  }
  apply();  // epoch 0, like PyTorch: the first optimizer.step() already uses the scheduled lr
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  MT_CHECK(optimizer_.num_param_groups() == base_lrs_.size(), name_, ": the optimizer has ",
           optimizer_.num_param_groups(), " param groups but the scheduler was made for ", base_lrs_.size(),
           " (add every param group before making the scheduler)");
  last_lr_.clear();
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = schedule_(base_lrs_[g], last_epoch_);
    optimizer_.set_lr(g, lr);
    last_lr_.push_back(lr);
  }
}

StateDict LRScheduler::state_dict() const {
  StateDict out{{"last_epoch", detail::scalar_entry(static_cast<double>(last_epoch_))}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    out["base_lrs." + std::to_string(g)] = detail::scalar_entry(base_lrs_[g]);
  }
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  detail::StateDictReader reader(state, name_);
  const size_t groups = reader.count_indices("base_lrs.");
  MT_CHECK(groups == optimizer_.num_param_groups(), name_, ": load_state_dict: the state dict has ", groups,
           " base lrs, the optimizer has ", optimizer_.num_param_groups(), " param groups");
  std::vector<double> base_lrs;
  for (size_t g = 0; g < groups; ++g) base_lrs.push_back(reader.scalar("base_lrs." + std::to_string(g)));
  const double epoch = reader.scalar("last_epoch");
  MT_CHECK(epoch >= 0 && epoch == std::floor(epoch), name_, ": load_state_dict: last_epoch must be a "
           "whole number >= 0, got ", epoch);
  reader.check_all_used();
  base_lrs_ = std::move(base_lrs);
  last_epoch_ = static_cast<int64_t>(epoch);
  apply();
}

// ---- the schedules ------------------------------------------------------------------------------

namespace {

Schedule lambda_schedule(std::function<double(int64_t)> factor) {
  MT_CHECK(factor != nullptr, "LambdaLR: the factor function is empty");
  return [factor = std::move(factor)](double base_lr, int64_t t) { return base_lr * factor(t); };
}

Schedule step_schedule(const StepLROptions& o) {
  MT_CHECK(o.step_size > 0, "StepLR: step_size is required and must be > 0, got ", o.step_size);
  return [o](double base_lr, int64_t t) {
    return base_lr * std::pow(o.gamma, static_cast<double>(t / o.step_size));  // t / step_size: whole decays
  };
}

Schedule cosine_schedule(const CosineAnnealingLROptions& o) {
  MT_CHECK(o.t_max > 0, "CosineAnnealingLR: t_max is required and must be > 0, got ", o.t_max);
  return [o](double base_lr, int64_t t) {
    return o.eta_min + (base_lr - o.eta_min) * (1 + std::cos(std::numbers::pi * t / o.t_max)) / 2;
  };
}

Schedule linear_schedule(const LinearLROptions& o) {
  MT_CHECK(o.start_factor >= 0 && o.start_factor <= 1, "LinearLR: start_factor must be in [0, 1], got ",
           o.start_factor);
  MT_CHECK(o.end_factor >= 0 && o.end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", o.end_factor);
  MT_CHECK(o.total_iters > 0, "LinearLR: total_iters must be > 0, got ", o.total_iters);
  return [o](double base_lr, int64_t t) {
    const double progress = static_cast<double>(std::min(t, o.total_iters)) / o.total_iters;
    return base_lr * (o.start_factor + (o.end_factor - o.start_factor) * progress);
  };
}

using SchedulerRefs = std::vector<std::reference_wrapper<const LRScheduler>>;

Schedule sequential_schedule(const Optimizer& optimizer, const SchedulerRefs& schedulers,
                             const std::vector<int64_t>& milestones) {
  MT_CHECK(!schedulers.empty(), "SequentialLR: needs at least one scheduler");
  MT_CHECK(milestones.size() + 1 == schedulers.size(), "SequentialLR: needs one milestone fewer than "
           "schedulers, got ", schedulers.size(), " schedulers and ", milestones.size(), " milestones");
  std::vector<Schedule> parts;
  for (size_t k = 0; k < schedulers.size(); ++k) {
    MT_CHECK(&schedulers[k].get().optimizer() == &optimizer, "SequentialLR: scheduler ", k,
             " belongs to a different optimizer");
    parts.push_back(schedulers[k].get().schedule());
  }
  for (size_t k = 0; k < milestones.size(); ++k) {
    MT_CHECK(milestones[k] > (k == 0 ? 0 : milestones[k - 1]), "SequentialLR: milestones must be positive "
             "and increasing; milestone ", k, " is ", milestones[k]);
  }
  return [parts = std::move(parts), milestones](double base_lr, int64_t t) {
    // The part whose range holds t: the number of milestones <= t (Python's bisect_right).
    const size_t k = std::upper_bound(milestones.begin(), milestones.end(), t) - milestones.begin();
    return parts[k](base_lr, k == 0 ? t : t - milestones[k - 1]);
  };
}

std::vector<double> first_base_lrs(const SchedulerRefs& schedulers) {
  return schedulers.empty() ? std::vector<double>{} : schedulers.front().get().base_lrs();
}

}  // namespace

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler("LambdaLR", optimizer, lambda_schedule(std::move(factor))) {}

StepLR::StepLR(Optimizer& optimizer, const StepLROptions& options)
    : LRScheduler("StepLR", optimizer, step_schedule(options)) {}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, const CosineAnnealingLROptions& options)
    : LRScheduler("CosineAnnealingLR", optimizer, cosine_schedule(options)) {}

LinearLR::LinearLR(Optimizer& optimizer, const LinearLROptions& options)
    : LRScheduler("LinearLR", optimizer, linear_schedule(options)) {}

SequentialLR::SequentialLR(Optimizer& optimizer, const SchedulerRefs& schedulers,
                           const std::vector<int64_t>& milestones)
    : LRScheduler("SequentialLR", optimizer, sequential_schedule(optimizer, schedulers, milestones),
                  first_base_lrs(schedulers)) {}

}  // namespace mt::optim
